package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

func meshrun(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
	return p
}

func TestCheckPassesOnEveryExample(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.mesh")
	more, _ := filepath.Glob("../../examples/*/*.mesh")
	deeper, _ := filepath.Glob("../../examples/*/*/*.mesh")
	files = append(append(files, more...), deeper...)
	require.GreaterOrEqual(t, len(files), 10)
	for _, f := range files {
		code, out, errs := meshrun(t, "", "check", f)
		require.Equal(t, ExitOK, code, "%s\n%s%s", f, out, errs)
		require.Contains(t, out, "PASS")
	}
}

func TestRunWritesWholeLogicalOutputs(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := meshrun(t, "", "run", "../../examples/megatron_mlp.mesh", "--out", dir, "--seed", "3")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "y : f32[64, 512] {S(0), B}")
	h, data, err := npy.ReadFile(filepath.Join(dir, "y.npy"))
	require.NoError(t, err)
	require.Equal(t, []int{64, 512}, h.Shape)
	// the same program on one device, by the same path, gives the same file
	single := writeFile(t, dir, "single.mesh", strings.Replace(readExample(t, "megatron_mlp"), "mesh M = [dp=2, tp=4]", "mesh M = [dp=1, tp=1]", 1))
	require.NoError(t, os.Symlink(mustAbs(t, "../../examples/x.npy"), filepath.Join(dir, "x.npy")))
	dir2 := filepath.Join(dir, "single")
	code, _, errs = meshrun(t, "", "run", single, "--out", dir2, "--seed", "3")
	require.Equal(t, ExitOK, code, errs)
	_, data2, err := npy.ReadFile(filepath.Join(dir2, "y.npy"))
	require.NoError(t, err)
	d := rt.CompareTensors(rt.FromSlice(h.Shape, data), rt.FromSlice(h.Shape, data2), 1e-4, 1e-5)
	require.True(t, d.OK, "max abs err %g", d.MaxAbs)
}

func readExample(t *testing.T, name string) string {
	b, err := os.ReadFile("../../examples/" + name + ".mesh")
	require.NoError(t, err)
	return string(b)
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}

func TestRunWritesAChromeTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	code, _, errs := meshrun(t, "", "run", "../../examples/megatron_mlp.mesh", "--trace", path)
	require.Equal(t, ExitOK, code, errs)
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &doc))
	comm := 0
	for _, e := range doc.TraceEvents {
		if e.Cat == "comm" {
			comm++
			require.Equal(t, float64(98304), e.Args["bytes_sent"])
		}
	}
	require.Equal(t, 8, comm, "one all-reduce on each of 8 devices")
}

func TestExplainJSON(t *testing.T) {
	code, out, errs := meshrun(t, "", "explain", "--json", "../../examples/megatron_mlp.mesh")
	require.Equal(t, ExitOK, code, errs)
	var r struct {
		Collectives []struct {
			Kind  string  `json:"kind"`
			Axis  string  `json:"axis"`
			Bytes float64 `json:"bytes_per_device"`
			Line  int     `json:"line"`
		} `json:"collectives"`
		Memory []struct {
			PeakBytes int64 `json:"peak_bytes"`
		} `json:"memory"`
		Ops []struct {
			Op        string `json:"op"`
			Placement string `json:"placement"`
		} `json:"ops"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Collectives, 1)
	require.Equal(t, "all_reduce", r.Collectives[0].Kind)
	require.Equal(t, "tp", r.Collectives[0].Axis)
	require.Equal(t, 14, r.Collectives[0].Line)
	require.Len(t, r.Memory, 8)
	require.Contains(t, out, `"kind": "all_reduce"`)
}

func TestExplainText(t *testing.T) {
	code, out, _ := meshrun(t, "", "explain", "../../examples/megatron_mlp.mesh")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "all_reduce")
	require.Contains(t, out, "96.0 KiB")
	require.Contains(t, out, "output y at megatron_mlp.mesh:14:1")
	require.Contains(t, out, "2(p-1)/p·G")
}

func TestCompileErrorExitsTwoWithCaret(t *testing.T) {
	p := writeFile(t, t.TempDir(), "bad.mesh", "mesh M = [dp=2]\ninput x : f32[4, 3] {S(2)} = zeros\n")
	code, _, errs := meshrun(t, "", "check", p)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "bad.mesh:2:22: S(2) splits dim 2 but the tensor has rank 2\n    input x : f32[4, 3] {S(2)} = zeros\n                         ^\n")
}

func TestMeshLargerThanDevices(t *testing.T) {
	code, _, errs := meshrun(t, "", "run", "../../examples/megatron_mlp.mesh", "--devices", "4")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "needs 8 devices but only 4 are available (--devices)")
}

func TestRunTimeFaultNamesDeviceOpAndLine(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "idx.npy"))
	require.NoError(t, err)
	require.NoError(t, npy.Write(f, []int{4}, []int64{0, 1, 2, 9}))
	f.Close()
	p := writeFile(t, dir, "emb.mesh", "mesh M = [dp=2]\nparam W : f32[5, 3] = normal(0, 1)\ninput i : i64[4] {S(0)} = load(\"idx.npy\")\ny = embedding(W, i)\noutput y\n")
	code, _, errs := meshrun(t, "", "run", p)
	require.Equal(t, ExitFailure, code)
	require.Contains(t, errs, "emb.mesh:4:5: device 1 (dp=1): embedding (y): embedding index 9 out of range [0, 5)")
}

func TestCheckMismatchExitsOne(t *testing.T) {
	testHookSharded = func(r *rt.Result) { r.Outputs[0].Data.([]float32)[7] += 1 }
	defer func() { testHookSharded = nil }()
	code, out, _ := meshrun(t, "", "check", "../../examples/megatron_mlp.mesh")
	require.Equal(t, ExitFailure, code)
	require.Contains(t, out, "MISMATCH")
	require.Contains(t, out, "FAIL")
}

func TestUsageAndHelp(t *testing.T) {
	code, _, _ := meshrun(t, "")
	require.Equal(t, ExitUsage, code)
	code, _, _ = meshrun(t, "", "frob")
	require.Equal(t, ExitUsage, code)
	code, out, _ := meshrun(t, "", "--help")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "meshrun explain FILE")
	for _, cmd := range []string{"run", "check", "explain", "repl"} {
		code, _, errs := meshrun(t, "", cmd, "--help")
		require.Equal(t, ExitOK, code, cmd)
		require.Contains(t, errs, "usage: meshrun "+cmd, cmd)
	}
	code, _, _ = meshrun(t, "", "run")
	require.Equal(t, ExitUsage, code)
	code, _, _ = meshrun(t, "", "run", "--bogus", "x.mesh")
	require.Equal(t, ExitUsage, code)
	code, _, errs := meshrun(t, "", "run", "/nonexistent/x.mesh")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "no such file")
	code, out, _ = meshrun(t, "", "grammar")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "MeshDecl =")
}

func TestLinkFlagChangesTheCostModel(t *testing.T) {
	_, fast, _ := meshrun(t, "", "explain", "--json", "../../examples/megatron_mlp.mesh")
	_, slow, _ := meshrun(t, "", "explain", "--json", "--link", "tp=50:1", "../../examples/megatron_mlp.mesh")
	require.NotEqual(t, fast, slow)
	require.Contains(t, slow, `"alpha_us": 50`)
	code, _, errs := meshrun(t, "", "explain", "--link", "zz=1:1", "../../examples/megatron_mlp.mesh")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "unknown mesh axis")
}

func TestREPLScripted(t *testing.T) {
	// Inputs whose products can be worked out by hand, every entry distinct
	// so a swapped row or column shows: x[r][i] = 8r + i, W[i][j] = i + 2j.
	dir := t.TempDir()
	xs, ws := make([]float32, 4*8), make([]float32, 8*8)
	for r := 0; r < 4; r++ {
		for i := 0; i < 8; i++ {
			xs[r*8+i] = float32(8*r + i)
		}
	}
	for i := 0; i < 8; i++ {
		for j := 0; j < 8; j++ {
			ws[i*8+j] = float32(i + 2*j)
		}
	}
	require.NoError(t, npy.WriteFile(filepath.Join(dir, "x.npy"), []int{4, 8}, xs))
	require.NoError(t, npy.WriteFile(filepath.Join(dir, "W.npy"), []int{8, 8}, ws))
	script := strings.Join([]string{
		"mesh M = [dp=2, tp=2]",
		fmt.Sprintf("param W : f32[8, 8] {B, S(1)} = load(%q)", filepath.Join(dir, "W.npy")),
		fmt.Sprintf("input x : f32[4, 8] {S(0), B} = load(%q)", filepath.Join(dir, "x.npy")),
		"y = x @ W",
		"sum(y, axis=1)",
		"z = to(y, {B, B})",
		"transpose(z)",
		":layout y",
		":layout s",
		"bad = foo(x)",
		"q = x @",
		"    W",
		"",
		"r = (x +",
		"",
		":names",
		":explain",
		":nope",
		"def f(a) {",
		"  return a * 2",
		"}",
		"f(x)",
		":quit",
		"never = 1",
	}, "\n")
	code, out, _ := meshrun(t, script, "repl")
	require.Equal(t, ExitOK, code)
	for _, want := range []string{
		"mesh M = [dp=2, tp=2]: 4 devices",
		"y : f32[4, 8] {S(0), S(1)}",
		"local: [2, 4] on d0-3",
		"inserted: all_gather of y over dp {S(0), S(1)} → {B, S(1)}",
		"sum#3 : f32[4] {S(0), P}",
		"rows 0:2  d0        d1",
		":layout: unknown name \"s\"",
		"unknown function \"foo\"",
		"q : f32[4, 8] {S(0), S(1)}",
		"unexpected end of file",
		"  W : f32[8, 8] {B, S(1)}",
		"collectives inserted by the compiler",
		"unknown command :nope",
		"defined f(a)",
		"mul#",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "never")

	// The values, worked out by hand from the formulas above:
	//   y[r][j] = sum_i (8r+i)(i+2j) = 140 + 56j + 224r + 128rj
	//   row 0 of y: 140 196 252 308 364 420 ...
	//   column 0 of y: 140 364 588 812; y[1][1] = 548
	//   sum_j y[r][j] = 2688 + 5376r: 2688 8064 13440 18816
	//   f(x) = 2x, row 0: 0 2 4 6 8 10 ...
	// The preview prints the first six values in row-major order.
	row0 := "[140 196 252 308 364 420 … (32 values)]"
	require.Equal(t, row0, replValue(t, out, "y : "))
	require.Equal(t, row0, replValue(t, out, "z : "), "to(y, {B, B}) gathers y unchanged")
	require.Equal(t, row0, replValue(t, out, "q : "), "a statement over two lines")
	require.Equal(t, "[2688 8064 13440 18816]", replValue(t, out, "sum#3 : "), "partial sums over tp added")
	require.Equal(t, "[140 364 588 812 196 548 … (32 values)]", replValue(t, out, "transpose#"))
	require.Equal(t, "[0 2 4 6 8 10 … (32 values)]", replValue(t, out, "mul#"))
}

// replValue returns what the REPL printed after "value: " for the result
// whose header line starts with head.
func replValue(t *testing.T, out, head string) string {
	t.Helper()
	_, rest, ok := strings.Cut(out, "\n"+head)
	require.True(t, ok, "no result %q in\n%s", head, out)
	for _, line := range strings.Split(rest, "\n")[1:] {
		if v, ok := strings.CutPrefix(line, "  value: "); ok {
			return v
		}
		if !strings.HasPrefix(line, "  ") {
			break
		}
	}
	t.Fatalf("result %q has no value line in\n%s", head, out)
	return ""
}

func TestREPLPartialDrawnDistinctly(t *testing.T) {
	script := "mesh M = [a=2, b=2]\ninput x : f32[4, 4] {S(1), B} = ones\ns = sum(x, axis=1)\n:layout s\n"
	_, out, _ := meshrun(t, script, "repl")
	require.Contains(t, out, "d0=d1 + d2=d3")
}

func TestTrainWritesParamsLogAndPlot(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.jsonl")
	png := filepath.Join(dir, "loss.png")
	code, out, errs := meshrun(t, "", "train", "../../examples/train/mlp_dp.mesh", "--out", dir, "--log", log, "--plot", png)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "trained steps 1 to 20 on 4 devices [dp=4]")
	require.Empty(t, errs, "no progress bar when stderr is not a terminal")
	lines := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
	require.Len(t, lines, 20)
	var first, last struct {
		Step int     `json:"step"`
		Loss float64 `json:"loss"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[19]), &last))
	require.Equal(t, 1, first.Step)
	require.Equal(t, 20, last.Step)
	require.Less(t, last.Loss, first.Loss)
	h, _, err := npy.ReadFile(filepath.Join(dir, "W.npy"))
	require.NoError(t, err)
	require.Equal(t, []int{16, 4}, h.Shape)
	b, err := os.ReadFile(png)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("\x89PNG")))
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

func TestRunRefusesATrainProgram(t *testing.T) {
	code, _, errs := meshrun(t, "", "run", "../../examples/train/mlp_dp.mesh")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "use meshrun train")
}

// estimate's figures, by hand: the ZeRO paper's 7.5B on 64 devices
// (120 / 31.4 / 16.6 / 1.9 GB, DP's split 30 + 15 + 15 + 60 GB), 2·63/64
// of 15 GB = 29.53 GB sent by DP (2.36 s at 12.5 GB/s), 3·63/64·15 GB =
// 44.30 GB by ZeRO-3; on 32 GB devices ZeRO-1 needs 90/(32−30) = 45
// devices, ZeRO-2 105/(32−15) → 7, ZeRO-3 120/32 → 4, DP never fits.
func TestEstimate(t *testing.T) {
	code, out, _ := meshrun(t, "", "estimate", "--params", "7.5e9", "--devices", "64", "--link", "12.5", "--gpu-memory", "32")
	require.Equal(t, ExitOK, code)
	for _, row := range []string{
		"DP     30.00 GB   15.00 GB  15.00 GB  60.00 GB         120.00 GB 29.53 GB        2.36 s       none (does not fit)",
		"ZeRO-1 0.47 GB    15.00 GB  15.00 GB  0.94 GB          31.41 GB  29.53 GB        2.36 s       45",
		"ZeRO-2 0.47 GB    15.00 GB  0.23 GB   0.94 GB          16.64 GB  29.53 GB        2.36 s       7",
		"ZeRO-3 0.47 GB    0.23 GB   0.23 GB   0.94 GB          1.88 GB   44.30 GB        3.54 s       4",
	} {
		require.Contains(t, out, row)
	}
	require.Contains(t, out, "parameters are the f32 master weights")
	require.Contains(t, out, `explain counts under "activations and other"`)
	code, _, _ = meshrun(t, "", "estimate")
	require.Equal(t, ExitUsage, code)
}

// A 65B model in fp16 under ZeRO-3 sends 3Ψ two-byte elements per step,
// ≈ 390 GB (389.62 GB with the ring's 1023/1024), 312 s at 10 Gb/s =
// 1.25 GB/s. In f32 the bytes double and there is no half copy.
func TestEstimate65BTraffic(t *testing.T) {
	code, out, _ := meshrun(t, "", "estimate", "--params", "65e9", "--devices", "1024", "--dtype", "f16", "--link", "1.25")
	require.Equal(t, ExitOK, code)
	require.Regexp(t, `ZeRO-3 .* 389\.62 GB +312 s`, out)
	code, out, _ = meshrun(t, "", "estimate", "--params", "65e9", "--devices", "1024", "--dtype", "f32")
	require.Equal(t, ExitOK, code)
	require.Regexp(t, `ZeRO-3 .* 779\.24 GB`, out)
	require.NotContains(t, out, "copy ")
}

func TestTrainErrors(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "t.mesh", `mesh M = [tp=2]
param W : f32[4, 2] = normal(0, 1)
train {
    loss = sum(W)
    optimizer = adagrad(lr=0.1)
    zero = 1
}
`)
	code, _, errs := meshrun(t, "", "train", p)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, `t.mesh:5:17: unknown optimizer "adagrad" (want sgd, momentum, adam or adamw)`)
}
