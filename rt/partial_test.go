package rt

import (
	"path/filepath"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// runWithFiles compiles src next to the given .npy files (name → shape,
// values) and runs it on its mesh.
func runWithFiles(t *testing.T, src string, files map[string]npyFile) *Result {
	t.Helper()
	dir := t.TempDir()
	for name, f := range files {
		require.NoError(t, npy.WriteFile(filepath.Join(dir, name), f.shape, f.data))
	}
	g, err := lang.CheckSource(filepath.Join(dir, "t.mesh"), []byte(src), lang.CheckOptions{Dir: dir})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
	require.NoError(t, err)
	return res
}

type npyFile struct {
	shape []int
	data  any // []float32 or []float64
}

// Half-precision partials are added in f32 and rounded once, by the
// collectives and by Assemble. 1000.5, -999.5 and 0.25 are exact in f16
// and so is their sum 1.25; rounding a running sum to f16 after each
// partial gives 1.5 (f16's spacing at 1000 is 0.5: 1000.75 is a tie that
// rounds to 1001). y is assembled from partials, b all-reduced, s
// reduce-scattered.
func TestHalfPartialsRoundOnce(t *testing.T) {
	src := `mesh M = [x=3]
input a : f32[2, 3] {S(1)} = load("a.npy")
y = sum(cast(a, "f16"), axis=1)
output y
b = to(y, {B})
output b
s = to(y, {S(0)})
output s
`
	rows := []float32{1000.5, -999.5, 0.25, 0.25, 1000.5, -999.5} // two orders
	res := runWithFiles(t, src, map[string]npyFile{"a.npy": {[]int{2, 3}, rows}})
	for _, name := range []string{"y", "b", "s"} {
		require.Equal(t, []float64{1.25, 1.25}, res.Output(name).Float64s(), "%s", name)
	}
}

// A bf16 matmul whose contracting dim is split over 3 devices: every row
// of x is ones, so every row of y must be the same. The partial sums of
// each column are 256, 1.5 and -255 (exact in bf16); their exact sum 2.5
// is too. A ring reduction rounds 256+1.5 to 258 or -255+1.5 to -254
// depending on where a row's chunk starts, so rows came out 3 or 2.
func TestHalfMatmulSplitContractingRowsAgree(t *testing.T) {
	src := `mesh M = [x=3]
input x : bf16[4, 6] {S(1)} = ones
input w32 : f32[6, 2] {S(0)} = load("w.npy")
w = cast(w32, "bf16")
y = x @ w
output y {B}
z = x @ w
output z
`
	w := []float32{128, 128, 128, 128, 1, 1, 0.5, 0.5, -127, -127, -128, -128}
	res := runWithFiles(t, src, map[string]npyFile{"w.npy": {[]int{6, 2}, w}})
	for _, name := range []string{"y", "z"} {
		require.Equal(t, []float64{2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, res.Output(name).Float64s(), "%s", name)
	}
}

// cast rounds, so it must not run on partial values: with the contracting
// dim split, x @ w is held as 1000.3 on one device and -1000 on the other,
// which cast separately to bf16 (1000 and -1000) sum to 0. The sum is
// 0.29998779296875 in f32 (1000.3 is 1000.29998779296875), whose bf16 is
// 0.30078125; in f64 the sum 0.3 - 4.5e-14 casts to f32 0.3.
func TestCastOfPartialRoundsTheSum(t *testing.T) {
	src := `mesh M = [x=2]
input x : f32[1, 2] {S(1)} = load("x.npy")
input w : f32[2, 1] {S(0)} = ones
y = cast(x @ w, "bf16")
output y
input x64 : f64[1, 2] {S(1)} = load("x64.npy")
input w64 : f64[2, 1] {S(0)} = ones
z = cast(x64 @ w64, "f32")
output z
`
	res := runWithFiles(t, src, map[string]npyFile{
		"x.npy":   {[]int{1, 2}, []float32{1000.3, -1000}},
		"x64.npy": {[]int{1, 2}, []float64{1000.3, -1000}},
	})
	require.Equal(t, []float64{0.30078125}, res.Output("y").Float64s())
	require.Equal(t, []float32{0.3}, res.Output("z").Data)
}

// nonfinite must not see the -inf a P(max) device holds where it owns
// nothing: max over an axis split 2, 1, 0 ways leaves the third device
// an empty shard, whose max is -inf; S -> P(max) fills with -inf.
func TestNonfiniteIgnoresMaxPlaceholders(t *testing.T) {
	p := compile(t, `mesh M = [x=3]
input x : f64[2, 3] {S(0)} = normal(0, 1)
a = nonfinite(max(x, axis=0))
output a
b = nonfinite(max(x))
output b
c = nonfinite(to(x, {P(max)}))
output c
`)
	res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
	require.NoError(t, err)
	for _, name := range []string{"a", "b", "c"} {
		require.Equal(t, []float64{0}, res.Output(name).Float64s(), "%s", name)
	}
}

// check's half-precision tolerance allows for partials rounded before
// their sum: an f16 matmul whose contracting dim is split 4 ways, on 64
// random inputs, stays within it, while the fixed bounds it replaces
// (rtol 5e-3, atol 1e-3) reject some of the same runs.
func TestHalfToleranceCoversPartialRounding(t *testing.T) {
	src := `mesh M = [x=4]
input a : f16[8, 64] {S(1)} = normal(0, 1)
input b : f16[64, 8] {S(0)} = normal(0, 1)
y = a @ b
output y
`
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{})
	require.NoError(t, err)
	ref, err := lower.Lower(g, lower.Options{Mesh: p.Mesh.Single()})
	require.NoError(t, err)
	tol := DefaultTolerance(ir.F16, p.Mesh.Size())
	oldFails := 0
	for seed := uint64(0); seed < 64; seed++ {
		opts := Options{Seed: seed, Backend: &CPU{BLAS: GonumBLAS{}}}
		got, err := Run(t.Context(), p, opts)
		require.NoError(t, err)
		want, err := Run(t.Context(), ref, opts)
		require.NoError(t, err)
		d := CompareWithin(got.Outputs[0], want.Outputs[0], tol)
		require.True(t, d.OK, "seed %d: max abs err %g, rel %g (%s)", seed, d.MaxAbs, d.MaxRel, tol)
		if !CompareTensors(got.Outputs[0], want.Outputs[0], 5e-3, 1e-3).OK {
			oldFails++
		}
	}
	require.Positive(t, oldFails, "the partials' rounding shows in some of these runs")
	t.Logf("fixed f16 bounds rejected %d of 64 runs", oldFails)
}

func TestDefaultTolerance(t *testing.T) {
	// u is 2^-11 for f16, 2^-8 for bf16
	require.Equal(t, Tolerance{Rtol: 4.0 / 2048, Norm: 8.0 / 2048}, DefaultTolerance(ir.F16, 8))
	require.Equal(t, Tolerance{Rtol: 4.0 / 256, Norm: 1.0 / 256}, DefaultTolerance(ir.BF16, 1))
	require.Equal(t, Tolerance{Rtol: 1e-4, Atol: 1e-5}, DefaultTolerance(ir.F32, 8))
	require.Equal(t, Tolerance{}, DefaultTolerance(ir.I64, 8))
	require.Equal(t, Tolerance{Rtol: 0.5, Atol: 0.25}, DefaultTolerance(ir.F16, 8).Override(0.5, 0.25))
	require.Equal(t, Tolerance{Rtol: 0.5, Norm: 8.0 / 2048}, DefaultTolerance(ir.F16, 8).Override(0.5, -1))
	// the normwise term: 0.004 = 8/2048 · max|want| (1.024) allows 0.004
	want := FromSlice([]int{2}, []float64{1.024, 0})
	require.True(t, CompareWithin(FromSlice([]int{2}, []float64{1.024, 0.004}), want, Tolerance{Norm: 8.0 / 2048}).OK)
	require.False(t, CompareWithin(FromSlice([]int{2}, []float64{1.024, 0.0041}), want, Tolerance{Norm: 8.0 / 2048}).OK)
}

// With an all-zero reference the relative error has no scale: it is
// reported as such, not as max abs err / 1e-300.
func TestRelErrWithZeroReference(t *testing.T) {
	d := CompareTensors(FromSlice([]int{2}, []float64{0, 1e-3}), FromSlice([]int{2}, []float64{0, 0}), 1e-4, 1e-5)
	require.False(t, d.OK)
	require.Equal(t, 1e-3, d.MaxAbs)
	require.Equal(t, "n/a (expected all zeros)", d.RelErr())
	d = CompareTensors(FromSlice([]int{2}, []float64{2, 1}), FromSlice([]int{2}, []float64{2, 0.5}), 0, 0)
	require.Equal(t, "0.25 (normwise)", d.RelErr())
}

// The half-precision reduce-scatter sends what the ring it replaces sends:
// for even shards the bytes each device sends per step equal the cost
// model's, for P → B (all-reduce) and P → S (reduce-scatter) of bf16 and
// f16 on one and two mesh axes.
func TestHalfReductionBytesMatchModel(t *testing.T) {
	for _, c := range []struct{ mesh, dt, from, to string }{
		{"[a=4]", "bf16", "{P}", "{B}"},
		{"[a=4]", "f16", "{P}", "{S(1)}"},
		{"[a=2, b=2]", "bf16", "{P, P}", "{B, S(0)}"},
		{"[a=2, b=2]", "f16", "{P, S(1)}", "{S(0), S(1)}"},
	} {
		src := "mesh M = " + c.mesh + "\ninput a : " + c.dt + "[4, 8] " + c.from + " = normal(0, 1)\ny = to(a, " + c.to + ")\noutput y\n"
		p := compile(t, src)
		require.NotEmpty(t, p.Convs, src)
		var model []float64
		for _, s := range p.Convs[0].Path.Steps {
			if s.Kind.Communicates() {
				model = append(model, s.Bytes)
			}
		}
		res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
		require.NoError(t, err)
		for dev, st := range res.Devices {
			var measured []float64
			for _, e := range st.Events {
				if e.Kind == "comm" {
					measured = append(measured, float64(e.Bytes))
				}
			}
			require.Equal(t, model, measured, "%s: device %d", src, dev)
		}
	}
}
