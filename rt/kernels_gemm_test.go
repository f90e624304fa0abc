package rt

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// noTrans hides a BLAS's TransBLAS methods: the matmul kernel must then
// transpose the operand into scratch itself.
type noTrans struct{ BLAS }

// TestMatmulTransposedOperands: matmul with either operand stored
// transposed (plan.Kernel.TransA/TransB, lower's gemm fusion) against a
// float64 triple loop over the logical operands, for f32 and f64, 2-D and
// batched (batch on both sides, and on A alone with B 2-D, which cannot
// fold A's batch into rows once A is transposed), with each BLAS here:
// gonum, OpenBLAS where it loads, meshrun's asm SGEMM where the CPU runs
// it, and gonum without its transposed entry points (the scratch path).
// The bound is the f32 (f64) rounding of a k-term dot product.
func TestMatmulTransposedOperands(t *testing.T) {
	blases := map[string]BLAS{"gonum": GonumBLAS{}, "gonum-scratch": noTrans{GonumBLAS{}}}
	if ob, err := LoadOpenBLAS(); err == nil {
		blases["openblas"], blases["openblas-scratch"] = ob, noTrans{ob}
	}
	if a := asmBLAS(); a != nil {
		blases["asm"] = a
	}
	shapes := []struct{ a, b []int }{ // logical operands: A [..., m, k] · B [..., k, n]
		{[]int{37, 19}, []int{19, 23}},
		{[]int{64, 48}, []int{48, 40}},
		{[]int{3, 9, 17}, []int{3, 17, 10}},
		{[]int{2, 3, 5, 7}, []int{2, 3, 7, 6}},
		{[]int{4, 6, 11}, []int{11, 5}},
		{[]int{1, 1}, []int{1, 1}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for name, bl := range blases {
		cpu := &CPU{BLAS: bl, arena: newArena(0)}
		for _, sh := range shapes {
			for _, dt := range []ir.DType{ir.F32, ir.F64} {
				for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
					label := fmt.Sprintf("%s %v·%v %s trans %v", name, sh.a, sh.b, dt, tr)
					a, b := randOperand(rng, dt, sh.a), randOperand(rng, dt, sh.b)
					want := refMatmul(a, b)
					sa, sb := a, b
					if tr[0] {
						sa = transpose(nil, a, swapLast(len(sh.a)))
					}
					if tr[1] {
						sb = transpose(nil, b, swapLast(len(sh.b)))
					}
					k := &plan.Kernel{Op: "matmul", DType: dt, TransA: tr[0], TransB: tr[1]}
					got, err := cpu.Compute(&OpCall{Kernel: k, Args: []*Tensor{sa, sb}, pool: cpu.arena})
					require.NoError(t, err, label)
					require.Equal(t, want.Shape, got.Shape, label)
					kk := sh.a[len(sh.a)-1]
					eps := 0x1p-24
					if dt == ir.F64 {
						eps = 0x1p-53
					}
					g, w := got.Float64s(), want.Float64s()
					for i := range w {
						require.InDelta(t, w[i], g[i], 2*float64(kk)*eps*refScale(a, b, kk)+1e-300, "%s at %d", label, i)
					}
				}
			}
		}
	}
}

// TestMatmulTransposedShapeErrors: a transposed operand whose stored
// shape does not fit is an error naming the transposed side.
func TestMatmulTransposedShapeErrors(t *testing.T) {
	cpu := &CPU{BLAS: GonumBLAS{}}
	a, b := NewTensor(ir.F32, []int{4, 3}), NewTensor(ir.F32, []int{4, 5})
	_, err := cpu.matmul(nil, a, b, false, false)
	require.EqualError(t, err, "local inner dims differ: [4, 3] @ [4, 5]")
	_, err = cpu.matmul(nil, a, b, true, false) // [3, 4] · [4, 5]: fits
	require.NoError(t, err)
	_, err = cpu.matmul(nil, a, b, false, true)
	require.EqualError(t, err, "local inner dims differ: [4, 3] @ [4, 5]ᵀ")
	_, err = cpu.matmul(nil, NewTensor(ir.F32, []int{3}), b, true, false)
	require.EqualError(t, err, "matmul of [3] and [4, 5]: both need two dims")
}

func swapLast(r int) []int {
	p := make([]int, r)
	for i := range p {
		p[i] = i
	}
	p[r-2], p[r-1] = r-1, r-2
	return p
}

func randOperand(rng *rand.Rand, dt ir.DType, shape []int) *Tensor {
	t := NewTensor(dt, shape)
	v := make([]float64, t.Numel())
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	storeFloat64s(t, v)
	return t
}

// refMatmul is A·B in float64 over the logical operands, B's batch
// broadcast when B is 2-D (the shapes above).
func refMatmul(a, b *Tensor) *Tensor {
	ra, rb := len(a.Shape), len(b.Shape)
	m, k, n := a.Shape[ra-2], a.Shape[ra-1], b.Shape[rb-1]
	nb := a.Numel() / (m * k)
	shape := append(append([]int{}, a.Shape[:ra-2]...), m, n)
	av, bv := a.Float64s(), b.Float64s()
	out := make([]float64, nb*m*n)
	for q := 0; q < nb; q++ {
		bo := 0
		if rb > 2 {
			bo = q * k * n
		}
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				s := 0.0
				for p := 0; p < k; p++ {
					s += av[q*m*k+i*k+p] * bv[bo+p*n+j]
				}
				out[q*m*n+i*n+j] = s
			}
		}
	}
	t := NewTensor(ir.F64, shape)
	storeFloat64s(t, out)
	return t
}

// refScale bounds |a_ip·b_pj| over the operands (the rounding bound's scale).
func refScale(a, b *Tensor, _ int) float64 {
	ma, mb := 0.0, 0.0
	for _, v := range a.Float64s() {
		ma = math.Max(ma, math.Abs(v))
	}
	for _, v := range b.Float64s() {
		mb = math.Max(mb, math.Abs(v))
	}
	return ma * mb
}

// TestMatmulBatchLayouts: batch dims on B alone (A 2-D), on both, and
// NumPy broadcasting through size-1 dims, each against a float64 loop
// that finds every output block's operand blocks from the index itself.
func TestMatmulBatchLayouts(t *testing.T) {
	cases := []struct{ a, b []int }{
		{[]int{5, 7}, []int{3, 7, 4}},
		{[]int{2, 5, 7}, []int{2, 7, 4}},
		{[]int{2, 1, 5, 7}, []int{1, 3, 7, 4}},
		{[]int{3, 5, 7}, []int{2, 1, 7, 4}},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	cpu := &CPU{BLAS: GonumBLAS{}, arena: newArena(0)}
	for _, c := range cases {
		a, b := randOperand(rng, ir.F64, c.a), randOperand(rng, ir.F64, c.b)
		got, err := cpu.matmul(cpu.arena, a, b, false, false)
		require.NoError(t, err, "%v @ %v", c.a, c.b)
		ra, rb := len(c.a), len(c.b)
		m, k, n := c.a[ra-2], c.a[ra-1], c.b[rb-1]
		nd := max(ra, rb) - 2
		batch := make([]int, nd)
		for d := range batch { // right-aligned, a missing dim counts as 1
			batch[d] = max(dimAt(c.a[:ra-2], d, nd), dimAt(c.b[:rb-2], d, nd))
		}
		require.Equal(t, append(batch, m, n), got.Shape)
		av, bv, gv := a.Float64s(), b.Float64s(), got.Float64s()
		idx := make([]int, nd)
		for q := 0; q < len(gv)/(m*n); q++ {
			rem := q
			for d := nd - 1; d >= 0; d-- {
				idx[d], rem = rem%batch[d], rem/batch[d]
			}
			ao, bo := blockOf(c.a[:ra-2], idx), blockOf(c.b[:rb-2], idx)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					s := 0.0
					for p := 0; p < k; p++ {
						s += av[ao*m*k+i*k+p] * bv[bo*k*n+p*n+j]
					}
					require.InDelta(t, s, gv[q*m*n+i*n+j], 1e-12, "%v @ %v batch %v (%d, %d)", c.a, c.b, idx, i, j)
				}
			}
		}
	}
}

// dimAt is batch dim d of dims right-aligned to nd dims (1 where missing).
func dimAt(dims []int, d, nd int) int {
	if j := d - (nd - len(dims)); j >= 0 {
		return dims[j]
	}
	return 1
}

// blockOf is the linear block index in an operand with batch dims dims of
// the output batch index idx (a size-1 dim reads its only block).
func blockOf(dims, idx []int) int {
	o := 0
	for j, dj := range dims {
		i := idx[len(idx)-len(dims)+j]
		if dj == 1 {
			i = 0
		}
		o = o*dj + i
	}
	return o
}

// TestMatmulOutputPastLimit: operands of valid sizes whose product would
// have more elements than any tensor may are an error naming both, not a
// panic.
func TestMatmulOutputPastLimit(t *testing.T) {
	cpu := &CPU{BLAS: GonumBLAS{}}
	a, b := NewTensor(ir.F32, []int{1 << 21, 1}), NewTensor(ir.F32, []int{1, 1 << 21})
	_, err := cpu.matmul(nil, a, b, false, false)
	require.EqualError(t, err, "matmul of [2097152, 1] and [1, 2097152]: an output of 1×2097152×2097152 elements is past the limit of 1099511627776")
}

// TestMatmulAllocations: a matmul through a rank's backend (Launch, then
// Free) allocates nothing once its arena holds an output of its shape
// (the tensor comes back whole, header and buffer): 2-D, batched on both
// sides, and batched A with 2-D B transposed (issue 10, goal 5: a small
// GEMM's fixed cost).
func TestMatmulAllocations(t *testing.T) {
	cpu := NewRankCPU(GonumBLAS{})
	for _, c := range []struct {
		a, b []int
		tb   bool
	}{
		{[]int{8, 4}, []int{4, 6}, false},
		{[]int{3, 8, 4}, []int{3, 4, 6}, false},
		{[]int{3, 8, 4}, []int{6, 4}, true},
	} {
		args := []Buffer{NewTensor(ir.F32, c.a), NewTensor(ir.F32, c.b)}
		k := &plan.Kernel{Op: "matmul", DType: ir.F32, TransB: c.tb}
		call := func() {
			y, err := cpu.Launch(context.Background(), k, args, nil, sbp.Block{})
			require.NoError(t, err)
			cpu.Free(y)
		}
		call()
		require.Zero(t, testing.AllocsPerRun(100, call), "%v @ %v: the arena hands the output back whole", c.a, c.b)
	}
}
