package lower

import (
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// buckets lists program 0's buckets of two or more, by their members'
// labels.
func buckets(p *Plan) [][]string {
	prog := p.Exec.Programs[0]
	var out [][]string
	for i := 0; i < len(prog.Instrs); i += prog.BucketAt(i) {
		if n := prog.BucketAt(i); n > 1 {
			var b []string
			for _, in := range prog.Instrs[i : i+n] {
				b = append(b, in.Label)
			}
			out = append(out, b)
		}
	}
	return out
}

// The training Megatron MLP's two weight gradients and its loss are
// reduced over dp in one launch, which pays the latency, 2(p−1)α = 10 µs
// on the default link, once instead of three times: explain's modelled
// step is 20 µs under the same plan's without buckets, and it lists the
// bucket with the three rows it holds.
func TestGradientsShareABucket(t *testing.T) {
	p := compileExample(t, "train/megatron_dp_tp")
	require.Equal(t, [][]string{{"matmul#23", "matmul#17", "train.loss"}}, buckets(p))
	g, _, err := lang.CheckFile("../examples/train/megatron_dp_tp.mesh", lang.CheckOptions{})
	require.NoError(t, err)
	alone, err := Lower(g, Options{Verify: true, NoBucket: true})
	require.NoError(t, err)
	require.Empty(t, buckets(alone))
	r, ra := Explain(p), Explain(alone)
	require.InDelta(t, ra.Totals.TimeUs-20, r.Totals.TimeUs, 1e-9)
	require.Len(t, r.Buckets, 1)
	b := r.Buckets[0]
	require.Equal(t, "dp", b.Axis)
	require.Equal(t, []int{2, 3, 5}, b.Rows)
	require.InDelta(t, 20, b.SavedUs, 1e-9)
	require.Equal(t, ra.Totals.MaxPeakBytes, r.Totals.MaxPeakBytes, "the peak")
}

// An all-reduce that reads another's result cannot share its launch; two
// that are independent do, and what reads the first moves after the
// bucket.
func TestDependentAllReducesStayApart(t *testing.T) {
	p, err := lowerSource(`mesh M = [tp=2]
input x : f32[4, 8] {S(1)} = normal(0, 1)
input W : f32[8, 8] {S(0)} = normal(0, 1)
input V : f32[8, 8] {S(1)} = normal(0, 1)
y = to(x @ W, {B})
z = to(y @ V, {S(1)})
a = to(z @ W, {B})
output a {B}
`)
	require.NoError(t, err)
	require.Empty(t, buckets(p), "each all-reduce reads the one before")
	// (E's square, first, is the peak, which the bucket does not raise)
	p, err = lowerSource(`mesh M = [tp=2]
input E : f32[64, 64] {B} = normal(0, 1)
input x : f32[4, 8] {S(1)} = normal(0, 1)
input W : f32[8, 8] {S(0)} = normal(0, 1)
input u : f32[4, 8] {S(1)} = normal(0, 1)
e = sum(E * E)
y = to(x @ W, {B})
s = y * 2
z = to(u @ W, {B})
output e {B}
output s {B}
output z {B}
`)
	require.NoError(t, err)
	require.Len(t, buckets(p), 1)
	prog := p.Exec.Programs[0]
	var order []string
	for _, in := range prog.Instrs {
		order = append(order, in.Name())
	}
	require.Equal(t, []string{"all_reduce(matmul#6)", "all_reduce(matmul#10)", "mul -> s"}, order[len(order)-3:], "the product of y waits for the bucket")
}

// The cap bounds a bucket's bytes per device: under one member's bytes
// no two share a launch.
func TestBucketCap(t *testing.T) {
	g, _, err := lang.CheckFile("../examples/train/megatron_dp_tp.mesh", lang.CheckOptions{})
	require.NoError(t, err)
	for _, c := range []struct {
		cap  int64
		want [][]string
	}{
		{2048 + 512 + 4, [][]string{{"matmul#23", "matmul#17", "train.loss"}}}, // the three blocks, exactly
		{2048 + 512, [][]string{{"matmul#23", "matmul#17"}}},
		{2047, [][]string{{"matmul#17", "train.loss"}}},
		{511, nil},
	} {
		p, err := Lower(g, Options{Verify: true, BucketBytes: c.cap})
		require.NoError(t, err)
		require.Equal(t, c.want, buckets(p), "cap %d", c.cap)
	}
}

// A bucket keeps its members' arguments until its end and moves what
// reads their results after it: here the first all-reduce's result is
// summed and dies before the second product is made, and launched
// together both products and both results live at once. Explain's peak
// counts it; under a memory budget that only the program without the
// bucket fits, the program is left as it was and lowers.
func TestBucketsStayWithinTheBudget(t *testing.T) {
	const src = `mesh M = [tp=2]
input x : f32[64, 64] {S(1)} = normal(0, 1)
input W : f32[64, 64] {S(0)} = normal(0, 1)
input u : f32[64, 64] {S(1)} = normal(0, 1)
input V : f32[64, 64] {S(0)} = normal(0, 1)
a = sum(to(x @ W, {B}))
b = sum(to(u @ V, {B}))
output a {B}
output b {B}
`
	g, err := lang.CheckSource("p.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := Lower(g, Options{Verify: true})
	require.NoError(t, err)
	alone, err := Lower(g, Options{Verify: true, NoBucket: true})
	require.NoError(t, err)
	require.Len(t, buckets(p), 1)
	require.Greater(t, p.Peak[0], alone.Peak[0])
	p, err = Lower(g, Options{Verify: true, Memory: alone.Peak[0]})
	require.NoError(t, err)
	require.Empty(t, buckets(p))
	require.Equal(t, alone.Peak, p.Peak)
}

// The verifier refuses a Joins that is not an all-reduce like the one
// before it, and a member that reads an earlier member's result.
func TestVerifierChecksJoins(t *testing.T) {
	p := compileExample(t, "train/megatron_dp_tp")
	prog := p.Exec.Programs[0]
	first := -1
	for i := range prog.Instrs {
		if prog.Instrs[i].Joins {
			first = i - 1
			break
		}
	}
	require.GreaterOrEqual(t, first, 0)
	bad := func(edit func(ins []plan.Instr), msg string) {
		was := prog.Instrs
		prog.Instrs = append([]plan.Instr(nil), was...)
		edit(prog.Instrs)
		require.ErrorContains(t, p.Exec.Verify(), msg)
		prog.Instrs = was
	}
	bad(func(ins []plan.Instr) { ins[first].Joins = true; ins[first-1].Joins = false }, "joins a bucket after")
	bad(func(ins []plan.Instr) { ins[first+3].Joins = true }, "not an all-reduce")
	bad(func(ins []plan.Instr) { ins[first+1].Args = []int{ins[first].Out} }, "the result of")
	bad(func(ins []plan.Instr) { ins[first+1].Group = 1 - ins[first].Group }, "over group")
	require.NoError(t, p.Exec.Verify())
}
