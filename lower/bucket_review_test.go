package lower

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// wholeFrees is each instruction's Free list as freeAfterLastUse makes it
// over the whole program, on a copy.
func wholeFrees(prog *plan.Program) [][]int {
	c := &plan.Program{Instrs: slices.Clone(prog.Instrs), SlotType: prog.SlotType, OutputSlots: prog.OutputSlots, CarrySlots: prog.CarrySlots}
	for i := range c.Instrs {
		c.Instrs[i].Free = nil
	}
	freeAfterLastUse(c)
	out := make([][]int, len(c.Instrs))
	for i := range c.Instrs {
		out[i] = slices.Sorted(slices.Values(c.Instrs[i].Free))
	}
	return out
}

func freesOf(prog *plan.Program) [][]int {
	out := make([][]int, len(prog.Instrs))
	for i := range prog.Instrs {
		out[i] = slices.Sorted(slices.Values(prog.Instrs[i].Free))
	}
	return out
}

// The bucket pass recomputes only the moved tail's frees
// (freeAfterLastUseFrom): on every example, wherever freeAfterLastUse
// over the whole program gives the frees without buckets, it gives the
// frees with them too.
func TestBucketTailFreesAreWholeProgramFrees(t *testing.T) {
	checked, bucketed := 0, 0
	for _, name := range examples(t) {
		g, _, err := lang.CheckFile(filepath.Join("..", "examples", name+".mesh"), lang.CheckOptions{})
		require.NoError(t, err)
		alone, err := Lower(g, Options{Verify: true, NoBucket: true})
		require.NoError(t, err)
		p, err := Lower(g, Options{Verify: true})
		require.NoError(t, err)
		for pi, prog := range p.Exec.Programs {
			if !slices.EqualFunc(freesOf(alone.Exec.Programs[pi]), wholeFrees(alone.Exec.Programs[pi]), slices.Equal) {
				t.Logf("%s program %d: another pass frees otherwise; not compared", name, pi)
				continue
			}
			checked++
			want := wholeFrees(prog)
			got := freesOf(prog)
			for i := range want {
				require.Equal(t, want[i], got[i], "%s program %d instruction %d (%s)", name, pi, i, prog.Instrs[i].Name())
			}
			for _, in := range prog.Instrs {
				if in.Joins {
					bucketed++
					break
				}
			}
		}
	}
	require.Positive(t, bucketed, "some compared program has a bucket")
	t.Logf("%d programs compared, %d with buckets", checked, bucketed)
}

// Every bucket member of every example maps to an explain row of its own:
// a collective of the bucket's kind of its value over its axis, no row
// claimed twice, and the
// bucket's bytes and time are its rows' (a written all-reduce's row
// included); a bucket's time is never negative.
func TestBucketRowsAreTheirMembers(t *testing.T) {
	for _, name := range examples(t) {
		p := compileExample(t, name)
		r := Explain(p)
		claimed := map[string]bool{}
		for bi, b := range r.Buckets {
			what := fmt.Sprintf("%s bucket %d %v", name, bi, b.Values)
			require.GreaterOrEqual(t, b.TimeUs, 0.0, what)
			bytes, time := 0.0, 0.0
			for k, row := range b.Rows {
				var c *CollectiveReport
				if row > 0 {
					c = &r.Collectives[row-1]
				} else {
					c = writtenRow(r, b.Kind, b.Values[k], b.Axis)
				}
				require.NotNil(t, c, "%s member %s: no row", what, b.Values[k])
				require.Equal(t, b.Kind, c.Kind, what)
				require.Equal(t, b.Values[k], c.Value, what)
				require.Equal(t, b.Axis, c.Axis, what)
				key := fmt.Sprintf("%d/%d/%s", b.Program, row, c.Value)
				if row > 0 {
					key = fmt.Sprintf("%d/row%d", b.Program, row)
				}
				require.False(t, claimed[key], "%s: row %s claimed twice", what, key)
				claimed[key] = true
				bytes += c.Bytes
				time += c.TimeUs
			}
			require.InDelta(t, bytes, b.Bytes, 1e-9, "%s: bytes", what)
			require.InDelta(t, time-b.SavedUs, b.TimeUs, 1e-6, "%s: time", what)
		}
	}
}

// writtenRow is the written collectives' row of kind of value over axis.
func writtenRow(r *Report, kind, value, axis string) *CollectiveReport {
	for i := range r.Written {
		if c := &r.Written[i]; c.Kind == kind && c.Value == value && c.Axis == axis {
			return c
		}
	}
	return nil
}

// donationProgram is a program whose second all-reduce reads what a
// donating instruction (a fused Adam update, the one kernel that runs in
// place) wrote over the first all-reduce's argument: the first must run
// before the donor, which overwrites its argument, and the second after
// it, so the two cannot share a launch.
//
//	s0 = x; s1 = y
//	s2 = all_reduce(s0)
//	s3, s4, s5 = adam_fused(s0, s1, s1, s1), s3 written over s0
//	s6 = all_reduce(s3)
func donationProgram() (*plan.Plan, *plan.Program) {
	m := mesh.New("M", mesh.Axis{Name: "dp", Size: 2})
	p, b := sbp.NdSBP{sbp.P}, sbp.Broadcasts(1)
	shape := []int{4}
	ar := func(arg, out int) plan.Instr {
		return plan.Instr{Kind: plan.Collective, Label: fmt.Sprintf("all_reduce#%d", out), Step: &sbp.Step{Kind: sbp.AllReduce, Axis: 0, From: p, To: b, Reduce: sbp.Sum},
			DType: ir.F32, Shape: shape, Placement: b, ArgPlace: []sbp.NdSBP{p}, Args: []int{arg}, Out: out}
	}
	src := func(i int) plan.Instr {
		return plan.Instr{Kind: plan.Source, Src: i, Label: fmt.Sprint("src", i), DType: ir.F32, Shape: shape, Placement: p, Out: i}
	}
	k := &plan.Kernel{Op: "adam_fused", DType: ir.F32, Shape: shape, ArgDTypes: []ir.DType{ir.F32, ir.F32, ir.F32, ir.F32}, ArgShapes: [][]int{shape, shape, shape, shape}}
	prog := &plan.Program{SlotType: slices.Repeat([]ir.DType{ir.F32}, 7), OutputSlots: []int{2, 6}}
	prog.Instrs = []plan.Instr{src(0), src(1), ar(0, 2),
		{Kind: plan.Compute, Label: "adam", Kernel: k, DType: ir.F32, Shape: shape, Placement: p, ArgPlace: []sbp.NdSBP{p, p, p, p},
			Args: []int{0, 1, 1, 1}, Out: 3, Outs: []int{4, 5}, Donate: []int{0, -1, -1}},
		ar(3, 6)}
	freeAfterLastUse(prog)
	sources := []plan.Tensor{{Name: "x", Role: "input", DType: ir.F32, Shape: shape, Placement: p, Home: -1}, {Name: "y", Role: "input", DType: ir.F32, Shape: shape, Placement: p, Home: -1}}
	outputs := []plan.Tensor{{Name: "a", DType: ir.F32, Shape: shape, Placement: b, Home: -1}, {Name: "c", DType: ir.F32, Shape: shape, Placement: b, Home: -1}}
	return &plan.Plan{Mesh: m, Sources: sources, Outputs: outputs, Groups: []plan.Group{{Axes: []int{0}}}, Programs: []*plan.Program{prog}}, prog
}

// A donation orders the donor after every other reader of the argument
// it overwrites (bucketOrder's edges); the buckets must see that order
// too, or a bucket would have to run both before and after the donor.
func TestBucketsRespectDonation(t *testing.T) {
	ex, prog := donationProgram()
	require.NoError(t, ex.WellFormed())
	var changed bool
	require.NotPanics(t, func() { changed = bucketProgram(ex, prog, internalGroups(ex), DefaultBucketBytes, nil) })
	require.False(t, changed, "no two all-reduces may share a launch")
	for _, in := range prog.Instrs {
		require.False(t, in.Joins, in.Name())
	}
}

// Two groups' all-reduces that depend on each other crosswise: y2 reads
// z1 (over b) and z2 reads y1 (over a). y2 may join y1's bucket, which
// then depends on z1's; z2 then depends on that bucket and may not join
// z1's (one launch of z1 and z2 would run both before and after the
// launch of y1 and y2). The pass must neither panic nor put them together,
// and the plan passes the cross-rank dry run.
func TestCrosswiseBucketsMakeNoCycle(t *testing.T) {
	p, err := lowerSource(`mesh M = [a=2, b=2]
input xa : f32[4, 8] {S(1), B} = normal(0, 1)
input Wa : f32[8, 8] {S(0), B} = normal(0, 1)
input xb : f32[4, 8] {B, S(1)} = normal(0, 1)
input Wb : f32[8, 8] {B, S(0)} = normal(0, 1)
y1 = to(xa @ Wa, {B, B})
z1 = to(xb @ Wb, {B, B})
y2 = to(to(z1, {S(1), B}) @ Wa, {B, B})
z2 = to(to(y1, {B, S(1)}) @ Wb, {B, B})
output y2 {B, B}
output z2 {B, B}
`)
	require.NoError(t, err)
	got := buckets(p)
	require.Len(t, got, 1, "%v", got)
	prog := p.Exec.Programs[0]
	for i := range prog.Instrs {
		if in := &prog.Instrs[i]; in.Joins {
			require.Equal(t, prog.Instrs[i-1].Group, in.Group)
		}
	}
	require.NoError(t, p.Exec.Verify())
	t.Logf("bucket %v", got)
}

// randomBucketProgram is a well-formed random program over a 2×2 mesh:
// all-reduces over either axis, additions, and fused Adam updates that
// write over a dying argument (donation), each reading slots made before.
func randomBucketProgram(r *rand.Rand) *plan.Plan {
	m := mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 2})
	pl := sbp.NdSBP{sbp.P, sbp.P}
	shape := []int{4}
	prog := &plan.Program{}
	var live []int         // slots a later instruction may read
	collective := []bool{} // per slot: a collective made it (never donated)
	newSlot := func() int {
		prog.SlotType = append(prog.SlotType, ir.F32)
		collective = append(collective, false)
		return len(prog.SlotType) - 1
	}
	pick := func() int { return live[r.Intn(len(live))] }
	var sources []plan.Tensor
	for i := range 3 {
		s := newSlot()
		sources = append(sources, plan.Tensor{Name: fmt.Sprint("x", i), Role: "input", DType: ir.F32, Shape: shape, Placement: pl, Home: -1})
		prog.Instrs = append(prog.Instrs, plan.Instr{Kind: plan.Source, Src: i, Label: fmt.Sprint("x", i), DType: ir.F32, Shape: shape, Placement: pl, Out: s})
		live = append(live, s)
	}
	add := &plan.Kernel{Op: "add", DType: ir.F32, Shape: shape, ArgDTypes: []ir.DType{ir.F32, ir.F32}, ArgShapes: [][]int{shape, shape}}
	adam := &plan.Kernel{Op: "adam_fused", DType: ir.F32, Shape: shape, ArgDTypes: []ir.DType{ir.F32, ir.F32, ir.F32, ir.F32}, ArgShapes: [][]int{shape, shape, shape, shape}}
	for range 6 + r.Intn(14) {
		switch k := r.Intn(5); {
		case k < 3: // an all-reduce over a or b
			a, s := r.Intn(2), newSlot()
			prog.Instrs = append(prog.Instrs, plan.Instr{Kind: plan.Collective, Label: fmt.Sprint("ar", s), Group: a,
				Step:  &sbp.Step{Kind: sbp.AllReduce, Axis: a, From: pl, To: pl, Reduce: sbp.Sum},
				DType: ir.F32, Shape: shape, Placement: pl, ArgPlace: []sbp.NdSBP{pl}, Args: []int{pick()}, Out: s})
			collective[s] = true
			live = append(live, s)
		case k == 3:
			x, y, s := pick(), pick(), newSlot()
			prog.Instrs = append(prog.Instrs, plan.Instr{Kind: plan.Compute, Label: fmt.Sprint("add", s), Kernel: add, DType: ir.F32, Shape: shape,
				Placement: pl, ArgPlace: []sbp.NdSBP{pl, pl}, Args: []int{x, y}, Out: s})
			live = append(live, s)
		default: // p' written over p, which dies here
			var own []int
			for _, s := range live {
				if !collective[s] {
					own = append(own, s)
				}
			}
			if len(own) == 0 || len(live) < 2 {
				continue
			}
			p := own[r.Intn(len(own))]
			live = slices.DeleteFunc(live, func(s int) bool { return s == p })
			g := pick()
			s, m2, v2 := newSlot(), newSlot(), newSlot()
			prog.Instrs = append(prog.Instrs, plan.Instr{Kind: plan.Compute, Label: fmt.Sprint("adam", s), Kernel: adam, DType: ir.F32, Shape: shape,
				Placement: pl, ArgPlace: []sbp.NdSBP{pl, pl, pl, pl}, Args: []int{p, g, g, g}, Out: s, Outs: []int{m2, v2}, Donate: []int{0, -1, -1}})
			live = append(live, s)
		}
	}
	out := live[len(live)-1]
	prog.OutputSlots = []int{out}
	freeAfterLastUse(prog)
	return &plan.Plan{Mesh: m, Sources: sources, Outputs: []plan.Tensor{{Name: "y", DType: ir.F32, Shape: shape, Placement: pl, Home: -1}},
		Groups: []plan.Group{{Axes: []int{0}}, {Axes: []int{1}}}, Programs: []*plan.Program{prog}}
}

// On random programs with donations, two groups and several caps, the pass never
// panics and leaves a well-formed program (every slot written before it
// is read, each donor after its argument's other readers, every bucket's
// members consecutive all-reduces of one group none reading another's
// result, within the cap) holding the same instructions.
func TestBucketRandomPrograms(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	joined := 0
	for n := range 3000 {
		ex := randomBucketProgram(r)
		require.NoError(t, ex.WellFormed(), "program %d before", n)
		prog := ex.Programs[0]
		before := map[string]int{}
		for _, in := range prog.Instrs {
			before[in.Label]++
		}
		limit := []int64{16, 32, 48, DefaultBucketBytes}[n%4] // a member's block is 16 bytes
		require.NotPanics(t, func() { bucketProgram(ex, prog, internalGroups(ex), limit, nil) }, "program %d:\n%s", n, ex.Dump())
		require.NoError(t, ex.WellFormed(), "program %d after:\n%s", n, ex.Dump())
		after := map[string]int{}
		for i, in := range prog.Instrs {
			after[in.Label]++
			if in.Joins {
				joined++
			} else if k := prog.BucketAt(i); k > 1 {
				require.LessOrEqual(t, int64(16*k), limit, "program %d: a bucket past the cap", n)
			}
		}
		require.Equal(t, before, after, "program %d", n)
	}
	require.Positive(t, joined)
	t.Logf("%d joins", joined)
}
