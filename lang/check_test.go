package lang

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var wantRe = regexp.MustCompile(`###\s*(".*")\s*$`)
var devicesRe = regexp.MustCompile(`^# devices: (\d+)`)

// TestErrors runs the chunked error files: every chunk must produce
// exactly the errors its "###" marks say, each at its line.
func TestErrors(t *testing.T) {
	for _, f := range []string{"testdata/errors.mesh", "testdata/pipeline_errors.mesh", "testdata/local_errors.mesh", "testdata/offload_errors.mesh"} {
		t.Run(f, func(t *testing.T) { testErrorFile(t, f) })
	}
}

func testErrorFile(t *testing.T, file string) {
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	lines := strings.Split(string(src), "\n")
	start := 0
	for i := 0; i <= len(lines); i++ {
		if i < len(lines) && strings.TrimSpace(lines[i]) != "---" {
			continue
		}
		checkChunk(t, lines, start, i)
		start = i + 1
	}
}

func checkChunk(t *testing.T, lines []string, from, to int) {
	// keep line numbers: blank out the other chunks
	chunk := make([]string, len(lines))
	want := map[int]string{}
	opts := CheckOptions{Dir: "testdata"}
	for i := from; i < to; i++ {
		chunk[i] = lines[i]
		if m := wantRe.FindStringSubmatch(lines[i]); m != nil {
			msg, err := strconv.Unquote(m[1])
			require.NoError(t, err, "line %d", i+1)
			want[i+1] = msg
		}
		if m := devicesRe.FindStringSubmatch(lines[i]); m != nil {
			opts.Devices, _ = strconv.Atoi(m[1])
		}
	}
	src := strings.TrimRight(strings.Join(chunk, "\n"), "\n")
	_, err := CheckSource("errors.mesh", []byte(src), opts)
	got := map[int]string{}
	var list ErrorList
	if err != nil {
		require.True(t, errors.As(err, &list), "chunk at line %d: %v", from+1, err)
		for _, e := range list {
			_, dup := got[e.Pos.Line]
			require.False(t, dup, "two errors at line %d: %v", e.Pos.Line, list)
			got[e.Pos.Line] = e.Msg
		}
	}
	require.Equal(t, want, got, "chunk starting at line %d", from+1)
}

func TestRenderShowsLineAndCaret(t *testing.T) {
	src := "mesh M = [dp=2]\ninput x : f32[4] = normal(0, 1)\ny = gelu(xq)\n"
	_, err := CheckSource("m.mesh", []byte(src), CheckOptions{})
	require.Error(t, err)
	out := Render(err, map[string][]byte{"m.mesh": []byte(src)})
	require.Equal(t, "m.mesh:3:10: unknown name \"xq\" (did you mean \"x\"?)\n    y = gelu(xq)\n             ^\n", out)
}

func TestErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("mesh M = [dp=2]\n")
	for i := 0; i < 15; i++ {
		b.WriteString("y" + strconv.Itoa(i) + " = nope\n")
	}
	_, err := CheckSource("m.mesh", []byte(b.String()), CheckOptions{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "(and 5 more errors)")
}

func TestFunctionsInlinePerCallSite(t *testing.T) {
	src := `mesh M = [dp=2]
input a : f32[3, 4] = normal(0, 1)
input b : f32[4, 5] = normal(0, 1)
def double(x) {
    y = x + x
    return y
}
p = double(a)
q = double(b)
output p
output q
`
	g, err := CheckSource("m.mesh", []byte(src), CheckOptions{})
	require.NoError(t, err)
	require.Equal(t, []int{3, 4}, g.Outputs[0].Value.Type.Shape)
	require.Equal(t, []int{4, 5}, g.Outputs[1].Value.Type.Shape)
	require.Equal(t, "double.y", g.Outputs[0].Value.Name)
	require.Equal(t, 8, g.Outputs[0].Value.Calls[0].Line)
	require.Equal(t, 9, g.Outputs[1].Value.Calls[0].Line)
}

func TestNamedPlacementAndStdlib(t *testing.T) {
	src := `use nn
mesh M = [dp=2, tp=4]
input x : f32[8, 16] {dp: S(0)} = normal(0, 1)
param W1 : f32[16, 32] {tp: S(1)} = normal(0, 1)
param W2 : f32[32, 16] {tp: S(0)} = normal(0, 1)
y = nn.mlp(x, W1, W2)
output y
`
	g, err := CheckSource("m.mesh", []byte(src), CheckOptions{})
	require.NoError(t, err)
	require.Equal(t, "{S(0), B}", g.Values[0].Declared.String())
	require.Equal(t, "{B, S(1)}", g.Values[1].Declared.String())
	require.Equal(t, []int{8, 16}, g.Outputs[0].Value.Type.Shape)
	require.Equal(t, "stdlib/nn.mesh", g.Outputs[0].Value.Pos.Filename)
}

func TestGrammarIsPrinted(t *testing.T) {
	gr := Grammar()
	for _, prod := range []string{"File", "MeshDecl", "TensorDecl", "PlacementLit", "Expr", "Call"} {
		require.Contains(t, gr, prod+" =")
	}
}

func TestForLoopsUnrollOverStackedParams(t *testing.T) {
	src := `mesh M = [dp=2]
param W : f32[3, 4, 4] = normal(0, 1)
input x : f32[2, 4] = normal(0, 1)
def f(h, n) {
    for i in range(n) {
        h = tanh(h @ index(W, i))
    }
    return h
}
y = f(x, 3)
output y
`
	g, err := CheckSource("m.mesh", []byte(src), CheckOptions{})
	require.NoError(t, err)
	tanhs := 0
	for _, v := range g.Values {
		if v.Op == "tanh" {
			tanhs++
		}
	}
	require.Equal(t, 3, tanhs)
	require.Equal(t, []int{2, 4}, g.Outputs[0].Value.Type.Shape)
}
