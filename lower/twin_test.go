package lower

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/bench/gptsrc"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// twinProgram is a checked program to lower both ways.
type twinProgram struct {
	name string
	g    *ir.Graph
}

// TestTwinsAreWhatThePassesCompute lowers every example and test program
// that checks, and pipelined variants (every schedule, ZeRO 1–3, mixed
// precision, more micro-batches) of those with a pipeline and of the
// generated GPT, twice: with the twins (twin.go) and without them, where
// every value is placed by choose and emitted with the interner's keys.
// Every value's placement and choice, every conversion, the
// instructions' values and the executable plan must be the same field for
// field, and the plans' kernels shared alike.
func TestTwinsAreWhatThePassesCompute(t *testing.T) {
	progs := twinPrograms(t)
	pipelined, twins, rows := 0, 0, 0
	for _, pr := range progs {
		tw := findTwins(pr.g)
		for i, j := range tw {
			if j < 0 {
				continue
			}
			v, c := pr.g.Values[i], pr.g.Values[j]
			if samePlace(v, c) && sameDesc(v, c) {
				twins++
				if !sameKernel(v, c) && sameAttrs(&v.Attrs, &c.Attrs, true) {
					rows++ // a slice of the rows or its pad: only Start and End differ
				}
			}
		}
		if pr.g.Pipeline != nil {
			pipelined++
		}
		got, gotErr := Lower(pr.g, Options{})
		twinsOff = true
		want, wantErr := Lower(pr.g, Options{})
		twinsOff = false
		require.Equal(t, errString(wantErr), errString(gotErr), pr.name)
		if wantErr != nil {
			continue
		}
		require.Equal(t, planTables(want), planTables(got), pr.name)
		require.True(t, reflect.DeepEqual(want.Exec, got.Exec), "%s: the executable plans differ", pr.name)
		require.Equal(t, kernelSharing(want.Exec), kernelSharing(got.Exec), pr.name)
		wb, err := plan.Marshal(want.Exec)
		require.NoError(t, err, pr.name)
		gb, err := plan.Marshal(got.Exec)
		require.NoError(t, err, pr.name)
		require.True(t, bytes.Equal(wb, gb), "%s: the encoded plans differ", pr.name)
	}
	t.Logf("%d programs, %d pipelined, %d twins, %d of them with other rows", len(progs), pipelined, twins, rows)
	require.Greater(t, pipelined, 30)
	require.Greater(t, twins, 10000)
	require.Greater(t, rows, 100)
}

// A twin's choice is reused only where the arguments are placed as the
// twin's: lowering a graph whose micro-batch 1 reads its rows placed
// otherwise than micro-batch 0 still places that micro-batch by choose.
func TestTwinChoiceChecksTheArguments(t *testing.T) {
	var b bytes.Buffer
	gptsrc.Write(&b, 8, true)
	g, err := lang.CheckSource("gpt.mesh", b.Bytes(), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := Lower(g, Options{})
	require.NoError(t, err)
	tw := findTwins(g)
	require.NotNil(t, tw)
	checked := 0
	replayInfer(p, func(v *ir.Value) {
		tv := tw.twin(g, v)
		if tv == nil || len(v.Args) == 0 || p.choiceOf(v) == nil || v.Op == "to" || isLocalOp(v) {
			return
		}
		if p.looksAhead(v) || p.choiceOf(tv).ahead {
			// v's choice or its twin's read more than the arguments'
			// placements (infer_ahead.go): never copied
			require.Nil(t, p.twinChoice(tw, v), v.Label())
			return
		}
		require.NotNil(t, p.twinChoice(tw, v), v.Label())
		// place an argument of the micro-batch's own otherwise: no
		// longer the twin's key
		k := slices.IndexFunc(v.Args, func(a *ir.Value) bool { return a.ID >= g.Train.Pipe.Micro[1].Start })
		if k < 0 {
			return
		}
		a := v.Args[k]
		saved := p.placeByID[a.ID]
		other := sbp.Broadcasts(len(saved))
		if saved.Equal(other) {
			other = slicesOn(len(saved))
		}
		p.placeByID[a.ID] = other
		require.Nil(t, p.twinChoice(tw, v), v.Label())
		p.placeByID[a.ID] = saved
		checked++
	})
	require.Greater(t, checked, 100)
}

// slicesOn is S(0) on each of n axes.
func slicesOn(n int) sbp.NdSBP {
	out := make(sbp.NdSBP, n)
	for i := range out {
		out[i] = sbp.S(0)
	}
	return out
}

// sameAttrs tells apart attributes that differ in any one field, and
// ignores only Start and End when asked to.
func TestSameAttrsCoversAttrs(t *testing.T) {
	require.Equal(t, 13, reflect.TypeFor[ir.Attrs]().NumField(), "ir.Attrs changed: update sameAttrs")
	variants := []func(a *ir.Attrs){
		func(a *ir.Attrs) { a.Axis = 1 },
		func(a *ir.Attrs) { a.Perm = []int{0} },
		func(a *ir.Attrs) { a.Perm = []int{} },
		func(a *ir.Attrs) { a.Eps = 1e-5 },
		func(a *ir.Attrs) { a.Eps = math.Copysign(0, -1) },
		func(a *ir.Attrs) { a.Scalar = 2 },
		func(a *ir.Attrs) { a.Init = &ir.Init{Kind: "zeros"} },
		func(a *ir.Attrs) { a.Regather = true },
		func(a *ir.Attrs) { a.Axes = []int{0} },
		func(a *ir.Attrs) { a.Axes = []int{} },
		func(a *ir.Attrs) { a.Root = 1 },
		func(a *ir.Attrs) { a.Shift = []int{1} },
		func(a *ir.Attrs) { a.Shift = []int{} },
		func(a *ir.Attrs) { a.Dim2 = 1 },
		func(a *ir.Attrs) { a.Place = sbp.NdSBP{sbp.B} },
		func(a *ir.Attrs) { a.Place = sbp.NdSBP{} },
	}
	var base ir.Attrs
	require.True(t, sameAttrs(&base, &base, false))
	for i, f := range variants {
		var a ir.Attrs
		f(&a)
		require.False(t, sameAttrs(&base, &a, false), "variant %d", i)
		require.False(t, sameAttrs(&base, &a, true), "variant %d", i)
	}
	rows := ir.Attrs{Start: 4, End: 8}
	require.False(t, sameAttrs(&base, &rows, false))
	require.True(t, sameAttrs(&base, &rows, true))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// planTables prints what the passes record per value and conversion, by
// value ID: placement, choice (with its conversions by index), and each
// conversion's value, path and cause; and the value of each instruction.
func planTables(p *Plan) string {
	var b strings.Builder
	for _, v := range p.Values {
		fmt.Fprintf(&b, "%d %v", v.ID, p.placementOf(v))
		if c := p.choiceOf(v); c != nil {
			fmt.Fprintf(&b, " sig %v→%v %q t=%x n=%d conv", c.Sig.In, c.Sig.Out, c.Sig.Why, math.Float64bits(c.Time), c.Candidates)
			for _, cv := range c.ArgConv {
				if cv == nil {
					b.WriteString(" -")
				} else {
					fmt.Fprintf(&b, " %d", cv.ID)
				}
			}
		}
		b.WriteByte('\n')
	}
	for _, c := range p.Convs {
		fmt.Fprintf(&b, "conv %d v%d %+v %v %v %q\n", c.ID, c.Value.ID, *c.Path, c.Pos, c.Calls, c.Cause)
	}
	for _, v := range p.InstrValue {
		fmt.Fprintf(&b, "i v%d\n", v.ID)
	}
	return b.String()
}

// kernelSharing numbers each program's kernels in order of first use:
// two plans share kernels alike when their sequences are equal.
func kernelSharing(ex *plan.Plan) [][]int {
	var out [][]int
	for _, prog := range ex.Programs {
		seen := map[*plan.Kernel]int{}
		var seq []int
		for _, in := range prog.Instrs {
			if in.Kernel == nil {
				continue
			}
			if _, ok := seen[in.Kernel]; !ok {
				seen[in.Kernel] = len(seen)
			}
			seq = append(seq, seen[in.Kernel])
		}
		out = append(out, seq)
	}
	return out
}

// twinPrograms checks every .mesh program under examples and lang's
// testdata (each chunk of a file of several), and pipelined variants.
func twinPrograms(t *testing.T) []twinProgram {
	var out []twinProgram
	add := func(name string, src []byte, opts lang.CheckOptions) bool {
		g, err := lang.CheckSource(name, src, opts)
		if err != nil {
			return false
		}
		out = append(out, twinProgram{name, g})
		return true
	}
	variants := func(name string, src []byte, opts lang.CheckOptions) {
		s := string(src)
		for _, set := range []string{"zero = 1", "zero = 2", "zero = 3", "precision = bf16", "microbatches = 6"} {
			add(name+" "+set, []byte(strings.Replace(s, "train {\n", "train {\n    "+set+"\n", 1)), opts)
		}
		for _, sched := range []string{"gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv"} {
			o := opts
			o.Pipeline = sched
			add(name+" "+sched, src, o)
		}
	}
	for _, root := range []string{"../examples", "../lang/testdata"} {
		require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".mesh") {
				return err
			}
			src, err := os.ReadFile(path)
			require.NoError(t, err)
			opts := lang.CheckOptions{Dir: filepath.Dir(path)}
			for i, chunk := range bytes.Split(src, []byte("\n---\n")) {
				if bytes.Contains(chunk, []byte("the program is too large")) {
					continue // slow, and an error
				}
				name := fmt.Sprintf("%s#%d", path, i)
				if add(name, chunk, opts) && out[len(out)-1].g.Pipeline != nil {
					variants(name, chunk, opts)
				}
			}
			return nil
		}))
	}
	var gpt bytes.Buffer
	gptsrc.Write(&gpt, 3, true)
	add("gptsrc-3", gpt.Bytes(), lang.CheckOptions{})
	variants("gptsrc-3", gpt.Bytes(), lang.CheckOptions{})
	return out
}

// sameDesc and sameKernel say two values are equal exactly where the keys
// they stand for (descKey with the dtypes, kernelKey) are: every pair of
// a set of values that differ from a base in one field each.
func TestSameKernelIsTheKernelKey(t *testing.T) {
	base, variants := oneFieldVariants()
	vals := make([]*ir.Value, len(variants))
	for i, f := range variants {
		vals[i] = base()
		f(vals[i])
	}
	descOf := func(v *ir.Value) string {
		b := descKey(nil, Desc(v))
		b = append(b, byte(v.Type.DType))
		for _, a := range v.Args {
			b = append(b, byte(a.Type.DType))
		}
		return string(b)
	}
	for i, a := range vals {
		for j, b := range vals {
			require.Equal(t, string(kernelKey(nil, a)) == string(kernelKey(nil, b)), sameKernel(a, b), "variants %d and %d", i, j)
			require.Equal(t, descOf(a) == descOf(b), sameDesc(a, b), "variants %d and %d", i, j)
		}
	}
}
