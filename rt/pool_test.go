package rt

import (
	"context"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

func TestHostPoolRecyclesBySizeOnce(t *testing.T) {
	p := newHostPool(1 << 20)
	a := NewTensor(ir.F32, []int{64, 64})
	p.put(a)
	p.put(a) // a second put of the same buffer must not make it twice available
	b := p.get(ir.F32, []int{4096})
	require.Equal(t, dataPtr(a.Data), dataPtr(b.Data))
	require.Equal(t, []int{4096}, b.Shape)
	c := p.get(ir.F32, []int{4096})
	require.NotEqual(t, dataPtr(a.Data), dataPtr(c.Data))
	// other dtypes and sizes never match; small buffers are not kept
	p.put(c)
	require.NotEqual(t, dataPtr(c.Data), dataPtr(p.get(ir.F64, []int{4096}).Data))
	small := NewTensor(ir.F32, []int{8})
	p.put(small)
	require.NotEqual(t, dataPtr(small.Data), dataPtr(p.get(ir.F32, []int{8}).Data))
	// beyond the limit freed buffers are dropped
	q := newHostPool(4096 * 4)
	q.put(NewTensor(ir.F32, []int{4096}))
	q.put(NewTensor(ir.F32, []int{4096}))
	require.Equal(t, 1, freeLen(q, keyOf(ir.F32, 4096, false)))
}

// freeCounter is a CPU backend that counts Free calls per buffer.
type freeCounter struct {
	CPU
	freed map[Buffer]int
}

func (f *freeCounter) Free(b Buffer) { f.freed[b]++ }

// A buffer two slots hold goes back to the backend once, when the second
// slot dies: a recycling backend must never get a buffer still in use.
func TestWorkerFreesABufferWhenItsLastSlotDies(t *testing.T) {
	m := mesh.New("M", mesh.Axis{Name: "a", Size: 1})
	b := sbp.NdSBP{sbp.B}
	at := ir.Pos{Filename: "f.mesh", Line: 1, Column: 1}
	add := &plan.Kernel{Op: "add", DType: ir.F32, Shape: []int{4}, ArgDTypes: []ir.DType{ir.F32, ir.F32}, ArgShapes: [][]int{{4}, {4}}}
	mk := func(kind plan.Kind, src, out int, free []int, args ...int) plan.Instr {
		in := plan.Instr{Kind: kind, Label: "x", Src: src, DType: ir.F32, Shape: []int{4}, Placement: b, Args: args, Out: out, Free: free, Pos: at}
		if kind == plan.Compute {
			in.Kernel, in.ArgPlace = add, []sbp.NdSBP{b, b}
		}
		return in
	}
	prog := &plan.Program{SlotType: []ir.DType{ir.F32, ir.F32, ir.F32, ir.F32}, OutputSlots: []int{3}, Instrs: []plan.Instr{
		mk(plan.Source, 0, 0, nil), mk(plan.Source, 1, 1, nil),
		mk(plan.Compute, 0, 2, []int{0}, 0, 1), mk(plan.Compute, 0, 3, []int{1, 2}, 2, 1),
	}}
	src := plan.Tensor{Role: "hyper", DType: ir.F32, Shape: []int{4}, Placement: b}
	p := &plan.Plan{Mesh: m, Programs: []*plan.Program{prog}, Sources: []plan.Tensor{src, src},
		Outputs: []plan.Tensor{{Name: "y", DType: ir.F32, Shape: []int{4}, Placement: b}}}
	require.NoError(t, p.Verify())
	be := &freeCounter{freed: map[Buffer]int{}}
	w, err := NewWorker(context.Background(), p, 0, be, NewInProc(1)[0], Options{})
	require.NoError(t, err)
	x := FromSlice([]int{4}, []float32{1, 2, 3, 4})
	res, err := w.Run(context.Background(), func(int) (Buffer, error) { return x, nil }, time.Now())
	require.NoError(t, err)
	require.Equal(t, 1, be.freed[x], "x is in slots 0 and 1: one Free, after both die")
	require.Equal(t, []float32{3, 6, 9, 12}, res.Outputs[0].(*Tensor).Data)
}

// A budgeted arena keeps a freed tensor only while the tensors it has
// handed out and those it keeps fit the budget; kernels' scratch does
// not count.
func TestArenaBudgetBoundsWhatItKeeps(t *testing.T) {
	const size = 4096 * 4 // one f32[4096]
	p := newArena(2 * size)
	a, b, c := p.zeroed(ir.F32, []int{4096}), p.zeroed(ir.F32, []int{4096}), p.zeroed(ir.F32, []int{4096})
	p.put(a) // two still out: keeping a would make three
	require.Zero(t, freeLen(p, keyOf(ir.F32, 4096, false)))
	p.put(b) // one out, one kept
	p.put(c)
	require.Equal(t, 2, freeLen(p, keyOf(ir.F32, 4096, false)))
	require.Equal(t, int64(0), p.out)
	s := p.f64(8192) // 64 KiB of scratch, four times the budget
	p.done(s)
	require.Len(t, *p.scratch[keyOf(ir.F64, 8192, true)].(*[][]float64), 1)
	// without a budget every freed tensor is kept
	q := newArena(0)
	x, y, z := q.zeroed(ir.F32, []int{4096}), q.zeroed(ir.F32, []int{4096}), q.zeroed(ir.F32, []int{4096})
	q.put(x)
	q.put(y)
	q.put(z)
	require.Equal(t, 3, freeLen(q, keyOf(ir.F32, 4096, false)))
}

// A freed tensor comes back whole, header and storage, when asked for in
// its own shape; in another shape of its size its storage comes back
// under a new header, and the old shape slice (which a kernel may share)
// is never written.
func TestArenaReusesHeaders(t *testing.T) {
	p := newArena(0)
	a := p.zeroed(ir.F32, []int{2, 3})
	a.Data.([]float32)[4] = 7
	p.put(a)
	b := p.zeroed(ir.F32, []int{2, 3})
	require.Same(t, a, b, "the same shape: the same tensor")
	require.Equal(t, p, b.home)
	require.Equal(t, make([]float32, 6), b.Data, "zeroed again")
	shared := []int{2, 3}
	b.Shape = shared // as reshape does
	p.put(b)
	c := p.get(ir.F32, []int{3, 2})
	require.NotSame(t, b, c)
	require.Equal(t, dataPtr(b.Data), dataPtr(c.Data))
	require.Equal(t, []int{3, 2}, c.Shape)
	require.Equal(t, []int{2, 3}, shared, "the old shape is untouched")
	require.Nil(t, c.home, "get's tensors have no home")
	p.put(c) // no home, but put directly: kept
	require.Nil(t, p.reuse(ir.F64, []int{3, 2}), "another dtype never matches")
	require.Same(t, c, p.reuse(ir.F32, []int{3, 2}))
}

// freeLen is the length of p's free list k (0 when it has none).
func freeLen(p *hostPool, k poolKey) int {
	if l := p.free[k]; l != nil {
		return len(*l)
	}
	return 0
}

// Two shapes of one size freed in turn: each asked for in its own shape
// gets its own tensor back, not the last one freed under a new header,
// and a step that alternates them allocates nothing (hostPool.take); a
// shape not among them takes the last one freed.
func TestArenaPrefersTheAskedShape(t *testing.T) {
	p := newArena(0)
	a := p.zeroed(ir.F32, []int{2, 3})
	b := p.zeroed(ir.F32, []int{3, 2})
	s := p.zeroed(ir.F32, nil) // a scalar and a [1] share a list
	one := p.zeroed(ir.F32, []int{1})
	p.put(a)
	p.put(b)
	p.put(s)
	p.put(one)
	require.Same(t, a, p.reuse(ir.F32, []int{2, 3}), "a, though b was freed after it")
	require.Same(t, s, p.reuse(ir.F32, nil), "the scalar, though [1] was freed after it")
	p.put(a)
	require.Same(t, b, p.reuse(ir.F32, []int{3, 2}))
	p.put(b)
	s23, s32 := []int{2, 3}, []int{3, 2} // made once: shapes escape through numel
	allocs := testing.AllocsPerRun(100, func() {
		x := p.zeroed(ir.F32, s23)
		y := p.zeroed(ir.F32, s32)
		p.put(y)
		p.put(x)
	})
	require.Zero(t, allocs)
	c := p.reuse(ir.F32, []int{6})
	require.Equal(t, dataPtr(a.Data), dataPtr(c.Data), "no [6] among them: the storage of the last one freed")
	require.Equal(t, []int{6}, c.Shape)
}
