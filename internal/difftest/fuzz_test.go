package difftest

import (
	"context"
	"errors"
	"flag"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
)

// FuzzShardedEqualsSingle generates a program from the fuzz input and
// requires it to compile and to give, for every output, the single-device
// result within check's tolerance. A generated program is always valid,
// so any compile error, run-time error or mismatch is a finding.
func FuzzShardedEqualsSingle(f *testing.F) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 48; i++ {
		b := make([]byte, 64)
		r.Read(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := Program(data)
		if err := differ(src); err != nil {
			t.Fatalf("%v\nprogram:\n%s", err, src)
		}
	})
}

var programs = flag.Int("programs", 0, "TestManyPrograms: how many random programs to check (0 skips)")

// TestManyPrograms checks -programs random programs without the fuzzer's
// coverage feedback: many more programs per minute than fuzzing, whose
// engine spends its time minimizing the new coverage each program finds.
//
//	go test ./internal/difftest -run TestManyPrograms -programs 20000 -timeout 30m
func TestManyPrograms(t *testing.T) {
	if *programs == 0 {
		t.Skip("set -programs N")
	}
	r := rand.New(rand.NewSource(time.Now().UnixNano()))
	for i := 0; i < *programs; i++ {
		b := make([]byte, 64)
		r.Read(b)
		if err := differ(Program(b)); err != nil {
			t.Fatalf("program %d (fuzz input %x): %v\nprogram:\n%s", i, b, err, Program(b))
		}
	}
	t.Logf("%d random programs: every output within tolerance", *programs)
}

// differ compiles src on its mesh and on one device, runs both and
// compares every output.
func differ(src string) error {
	g, err := lang.CheckSource("fuzz.mesh", []byte(src), lang.CheckOptions{})
	if err != nil {
		return err
	}
	p, err := lower.Lower(g, lower.Options{Verify: true})
	if err != nil {
		return err
	}
	ref, err := lower.Lower(g, lower.Options{Mesh: p.Mesh.Single()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
	got, err := rt.Run(ctx, p, rt.Options{Seed: 7, Backend: cpu})
	if err != nil {
		return err
	}
	want, err := rt.Run(ctx, ref, rt.Options{Seed: 7, Backend: cpu})
	if err != nil {
		return err
	}
	var errs []error
	for i, name := range want.Names {
		w := want.Outputs[i]
		tol := rt.OutputTolerance(g, name, p.Mesh.Size())
		tol.Atol += tol.Norm * ancestorScale(g, want, name)
		d := rt.CompareWithin(got.Output(name), w, tol)
		if !d.OK {
			errs = append(errs, &mismatch{name, d, tol, got.Output(name).Float64s(), w.Float64s()})
		}
	}
	return errors.Join(errs...)
}

// ancestorScale is the largest magnitude among the values an output was
// computed from, which the fuzz adds to the normwise half-precision bound
// as an absolute one. check scales by the output alone, which covers
// partials of the output's own size; but a half-precision partial is
// rounded at its own magnitude, which can be far above the result's: the
// mean of an input's values of both signs is far smaller than the thirds
// it sums, and log(v·v + 1) near 0 keeps the rounding of its argument near
// 1 (a plan may add the 1 to one device's partial of v·v). The generator
// outputs every value, so the single-device run knows each magnitude.
func ancestorScale(g *ir.Graph, want *rt.Result, name string) float64 {
	byValue := map[*ir.Value]string{}
	var root *ir.Value
	for _, o := range g.Outputs {
		byValue[o.Value] = o.Name
		if o.Name == name {
			root = o.Value
		}
	}
	biggest := 0.0
	seen := map[*ir.Value]bool{root: true}
	stack := []*ir.Value{root}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n, ok := byValue[v]; ok && v.Type.DType.IsFloat() {
			biggest = math.Max(biggest, maxAbs(want.Output(n)))
		}
		for _, a := range v.Args {
			if !seen[a] {
				seen[a] = true
				stack = append(stack, a)
			}
		}
	}
	return biggest
}

func maxAbs(t *rt.Tensor) float64 {
	m := 0.0
	for _, x := range t.Float64s() {
		if !math.IsInf(x, 0) && !math.IsNaN(x) {
			m = math.Max(m, math.Abs(x))
		}
	}
	return m
}

type mismatch struct {
	name      string
	d         rt.Diff
	tol       rt.Tolerance
	got, want []float64
}

func (m *mismatch) Error() string {
	const show = 8
	g, w := m.got, m.want
	if len(g) > show {
		g, w = g[:show], w[:show]
	}
	return "output " + m.name + ": sharded differs from one device: max abs err " +
		fmtFloat(m.d.MaxAbs) + " at " + fmtInt(m.d.At) + ", rel " + m.d.RelErr() + " (" + m.tol.String() + ")\n  got  " + fmtFloats(g) + "\n  want " + fmtFloats(w)
}

func fmtFloat(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
func fmtInt(i int) string       { return strconv.Itoa(i) }
func fmtFloats(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmtFloat(x))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// The generator reaches every forward op, every dtype and every kind of
// placement within the seed corpus's first few hundred programs.
func TestGeneratorCoversEveryOp(t *testing.T) {
	seen := map[string]bool{}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 300; i++ {
		b := make([]byte, 64)
		r.Read(b)
		src := Program(b)
		g, err := lang.CheckSource("fuzz.mesh", []byte(src), lang.CheckOptions{})
		if err != nil {
			t.Fatalf("generated program rejected: %v\n%s", err, src)
		}
		for _, v := range g.Values {
			seen[v.Op] = true
			seen[v.Type.DType.String()] = true
			for _, e := range v.Declared {
				seen[e.String()] = true
			}
		}
	}
	want := append(lang.BuiltinOps(), "f64", "f32", "bf16", "f16", "P", "P(max)", "S(2)")
	var missing []string
	for _, w := range want {
		if !seen[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("never generated: %v", missing)
	}
}
