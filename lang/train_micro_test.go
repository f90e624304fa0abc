package lang

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/bench/gptsrc"
	"github.com/meshrun/meshrun/ir"
	"github.com/stretchr/testify/require"
)

// microProgram is a program to check both ways.
type microProgram struct {
	name string
	src  []byte
	opts CheckOptions
}

// TestMicroCopyIsTheCheckedGraph checks every example, every test program
// (and each chunk of the error files), the generated GPT on both meshes,
// and variants of the training programs with micro-batches, ZeRO stages,
// mixed precision, clipping and every pipeline schedule, twice: copying
// micro-batch 0 for the others (train_micro.go) and checking each
// micro-batch (the reference). The graphs must be the same value for
// value, field for field (arguments and other values by ID), and so must
// the train block's tables and the errors.
func TestMicroCopyIsTheCheckedGraph(t *testing.T) {
	progs := microPrograms(t)
	copied, withMicro := 0, 0
	for _, p := range progs {
		ref := p.opts
		ref.noMicroCopy = true
		gotG, gotErr, n := checkCounting(p, p.opts)
		wantG, wantErr, n0 := checkCounting(p, ref)
		require.Zero(t, n0, p.name)
		require.Equal(t, errText(wantErr), errText(gotErr), p.name)
		if wantG == nil {
			continue
		}
		require.Equal(t, graphText(wantG), graphText(gotG), p.name)
		copied += n
		if p.name == "grad-in-body" {
			require.Zero(t, n, "grad() in the block caches its backward: no copy")
		}
		if wantG.Train != nil && wantG.Train.Accumulate > 1 {
			withMicro++
		}
	}
	t.Logf("%d programs, %d with micro-batches, %d micro-batches copied", len(progs), withMicro, copied)
	require.Greater(t, withMicro, 60)
	require.Greater(t, copied, 150)
}

// The copy spends the budget as checking would: a block whose later
// micro-batches cross MaxWork fails at the same line, with the same
// message, as when each micro-batch is checked.
func TestMicroCopySpendsTheBudget(t *testing.T) {
	// a budget of 10000 and about 70 units per 10 iterations per
	// micro-batch: 30 iterations fit in it (3 micro-batches copied), 40
	// cross it in micro-batch 3 (2 copied before), 60 in micro-batch 2
	for n, copies := range map[int]int{30: 3, 40: 2, 60: 1} {
		src := fmt.Sprintf(`mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
param W : f32[4, 4] {B} = normal(0, 0.1)
train {
    h = x @ W
    for i in range(10) {
        for j in range(%d) {
            h = h * 1.0
        }
    }
    loss = mean(h)
    optimizer = sgd(lr=0.1)
    accumulate = 4
}
`, n)
		p := microProgram{name: "budget.mesh", src: []byte(src), opts: CheckOptions{maxWork: 10000}}
		ref := p.opts
		ref.noMicroCopy = true
		_, gotErr, copied := checkCounting(p, p.opts)
		require.Equal(t, copies, copied, "n=%d", n)
		_, wantErr, _ := checkCounting(p, ref)
		require.Equal(t, errText(wantErr), errText(gotErr), "n=%d", n)
		if n > 30 {
			require.ErrorContains(t, wantErr, "the program is too large", "n=%d", n)
		}
	}
}

// checkCounting checks p with opts and says how many micro-batches were
// copied.
func checkCounting(p microProgram, opts CheckOptions) (*Graph, error, int) {
	f, err := Parse(p.name, p.src)
	if err != nil {
		return nil, err, 0
	}
	c := NewChecker(p.name, p.src, opts)
	if err := c.File(f); err != nil {
		return nil, err, c.copied
	}
	return c.Graph(), nil, c.copied
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// microPrograms lists the programs TestMicroCopyIsTheCheckedGraph checks.
func microPrograms(t *testing.T) []microProgram {
	var out []microProgram
	var files []string
	for _, root := range []string{"../examples", "../stdlib", "testdata"} {
		require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".mesh") {
				files = append(files, path)
			}
			return err
		}))
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		opts := CheckOptions{Dir: filepath.Dir(path)}
		for i, chunk := range bytes.Split(src, []byte("\n---\n")) {
			if bytes.Contains(chunk, []byte("the program is too large")) {
				continue // TestErrors and TestMicroCopySpendsTheBudget; slow
			}
			name := path + "#" + strconv.Itoa(i)
			out = append(out, microProgram{name, chunk, opts})
			if _, err := CheckSource(name, chunk, opts); err == nil {
				out = append(out, microVariants(name, chunk, opts)...)
			}
		}
	}
	for _, pipelined := range []bool{false, true} {
		var b bytes.Buffer
		gptsrc.Write(&b, 3, pipelined)
		name := fmt.Sprintf("gptsrc-3-pipelined=%v", pipelined)
		out = append(out, microProgram{name, b.Bytes(), CheckOptions{}})
		out = append(out, microVariants(name, b.Bytes(), CheckOptions{})...)
	}
	out = append(out, microProgram{"grad-in-body", []byte(gradInBody), CheckOptions{}})
	return out
}

// microVariants are a training program with settings added to its train
// block, and, on a pipeline, each schedule.
func microVariants(name string, src []byte, opts CheckOptions) []microProgram {
	s := string(src)
	if !strings.Contains(s, "train {\n") {
		return nil
	}
	var out []microProgram
	for _, set := range [][]string{
		{"accumulate = 2"},
		{"accumulate = 4", "zero = 1"},
		{"accumulate = 2", "zero = 2"},
		{"accumulate = 4", "zero = 3"},
		{"accumulate = 2", "precision = f16"},
		{"accumulate = 2", "precision = bf16", "zero = 2"},
		{"accumulate = 2", "clip = 1.0", "schedule = cosine(warmup=2, min_lr=0.001)"},
		{"microbatches = 2"},
		{"microbatches = 4", "zero = 2"},
	} {
		body := "train {\n    " + strings.Join(set, "\n    ") + "\n"
		v := strings.Replace(s, "train {\n", body, 1)
		out = append(out, microProgram{name + " " + strings.Join(set, ", "), []byte(v), opts})
	}
	if strings.Contains(s, "pipeline ") {
		for _, sched := range []string{"gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv"} {
			o := opts
			o.Pipeline = sched
			out = append(out, microProgram{name + " pipeline " + sched, src, o})
		}
	}
	return out
}

// gradInBody takes grad() inside the train block, whose backward the
// checker caches: checked per micro-batch, never copied.
const gradInBody = `mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
param W : f32[4, 4] {B} = normal(0, 0.1)
train {
    h = x @ W
    g = grad(mean(h * h), W)
    loss = mean(h) + mean(g)
    optimizer = sgd(lr=0.1)
    accumulate = 4
}
`

// graphText prints g with every field of every value, arguments and other
// references to values as their IDs, and maps in key order.
func graphText(g *Graph) string {
	var b strings.Builder
	for _, v := range g.Values {
		fmt.Fprintf(&b, "%d: ", v.ID)
		writeFields(&b, reflect.ValueOf(*v))
		b.WriteByte('\n')
	}
	c := *g
	c.Values, c.Sources = nil, nil // the sources are the same text
	writeFields(&b, reflect.ValueOf(c))
	return b.String()
}

var valuePtr = reflect.TypeOf((*ir.Value)(nil))

// writeFields prints x; a *ir.Value as its ID.
func writeFields(b *strings.Builder, x reflect.Value) {
	switch {
	case x.Type() == valuePtr:
		if x.IsNil() {
			b.WriteString("<nil>")
		} else {
			fmt.Fprintf(b, "v%d", x.Elem().FieldByName("ID").Int())
		}
		return
	}
	switch x.Kind() {
	case reflect.Pointer, reflect.Interface:
		if x.IsNil() {
			b.WriteString("<nil>")
			return
		}
		b.WriteByte('&')
		writeFields(b, x.Elem())
	case reflect.Struct:
		b.WriteByte('{')
		for i := 0; i < x.NumField(); i++ {
			b.WriteString(x.Type().Field(i).Name + ":")
			writeFields(b, x.Field(i))
			b.WriteByte(' ')
		}
		b.WriteByte('}')
	case reflect.Slice, reflect.Array:
		b.WriteByte('[')
		for i := 0; i < x.Len(); i++ {
			writeFields(b, x.Index(i))
			b.WriteByte(' ')
		}
		b.WriteByte(']')
	case reflect.Map:
		entries := make([]string, 0, x.Len())
		it := x.MapRange()
		for it.Next() {
			var e strings.Builder
			writeFields(&e, it.Key())
			e.WriteString("=>")
			writeFields(&e, it.Value())
			entries = append(entries, e.String())
		}
		sort.Strings(entries)
		b.WriteString("map[" + strings.Join(entries, " ") + "]")
	case reflect.Func:
		if !x.IsNil() {
			b.WriteString("func")
		}
	default:
		fmt.Fprint(b, leaf(x))
	}
}

// leaf is a basic value's text (fields may be unexported, so no Interface).
func leaf(x reflect.Value) string {
	switch x.Kind() {
	case reflect.Bool:
		return strconv.FormatBool(x.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(x.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(x.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(x.Float(), 'g', -1, 64)
	case reflect.String:
		return strconv.Quote(x.String())
	}
	return x.Kind().String()
}
