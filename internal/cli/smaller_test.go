package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

func TestExplainShowsTrainingMemoryOnlyForTraining(t *testing.T) {
	code, out, errs := meshrun(t, "", "explain", "../../examples/megatron_mlp.mesh")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "peak memory per device")
	require.NotContains(t, out, "in a training step")
	code, out, errs = meshrun(t, "", "explain", "../../examples/train/mlp_dp.mesh")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "memory per device in a training step")
}

func TestHelpTexts(t *testing.T) {
	code, _, errs := meshrun(t, "", "check", "--help")
	require.Equal(t, ExitOK, code)
	require.NotContains(t, errs, "default -1")
	for _, want := range []string{"-rtol R", "-atol A", "f32 0.0001", "f64 1e-09", "f16 0.001953125", "bf16 0.015625", "bf16 devices·0.00390625·max|want|", "integers exact"} {
		require.Contains(t, errs, want)
	}
	code, _, errs = meshrun(t, "", "train", "--help")
	require.Equal(t, ExitOK, code)
	usage, _, _ := strings.Cut(errs, "\n")
	for _, want := range []string{"--save DIR", "--save-every N", "--resume DIR", "--stop-at STEP"} {
		require.Contains(t, usage, want)
	}
	code, out, errs := meshrun(t, "", "grammar", "--help")
	require.Equal(t, ExitOK, code)
	require.Empty(t, out, "grammar --help must not print the grammar")
	require.Contains(t, errs, "usage: meshrun grammar")
	code, out, _ = meshrun(t, "", "grammar")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "Stmt")
}

// The progress line never reaches the terminal's last column, however
// narrow, so it is redrawn in place instead of wrapping.
func TestProgressFitsTheTerminal(t *testing.T) {
	for _, cols := range []int{200, 80, 60, 40, 12, 1} {
		var b bytes.Buffer
		p := &progress{w: &b, tty: true, cols: func() int { return cols }, samples: 32, start: time.Now().Add(-time.Second)}
		for step := 1; step <= 3; step++ {
			p.step(rt.StepInfo{Step: step, Steps: 3, Loss: 0.123456})
		}
		lines := strings.Split(b.String(), "\r")[1:]
		require.Len(t, lines, 3)
		for _, l := range lines {
			l = strings.TrimSuffix(l, "\x1b[K")
			require.LessOrEqual(t, utf8.RuneCountInString(l), max(cols-1, 0), "%d columns: %q", cols, l)
			require.NotContains(t, l, "\n")
		}
		if cols >= 80 {
			require.Contains(t, lines[2], "[=====")
			require.Contains(t, lines[2], "step 3/3")
		}
	}
	require.Equal(t, 80, columnsFromEnv(t, ""))
	require.Equal(t, 57, columnsFromEnv(t, "57"))
}

func columnsFromEnv(t *testing.T, v string) int {
	t.Setenv("COLUMNS", v)
	return columns(-1)
}

func TestRunPrintsIntegersAsIntegers(t *testing.T) {
	tt := &rt.Tensor{Shape: []int{8}, Data: []int64{4611686018427387904, -1, 2, 3, 4, 5, 6, 7}}
	require.Equal(t, "[4611686018427387904 -1 2 3 4 5 … (8 values)]", preview(tt))
}

// --dump-after prints once the command line is known to be good (see the
// hostile table for a bad one), and when lowering fails.
func TestDumpAfterPrintsThePlan(t *testing.T) {
	code, out, errs := meshrun(t, "", "run", "../../examples/megatron_mlp.mesh", "--dump-after", "spmd")
	require.Equal(t, ExitOK, code, errs)
	dump, report, ok := strings.Cut(out, "y : f32[64, 512]")
	require.True(t, ok, out)
	require.Contains(t, dump, "=== after spmd ===")
	require.NotContains(t, report, "=== after")
}

// The REPL lowers with the links of --alpha, --bandwidth and --link.
func TestREPLUsesTheLinkFlags(t *testing.T) {
	code, out, errs := meshrun(t, "mesh M = [dp=2]\ninput x : f32[8, 4] {S(0)} = ones\n:explain\n", "repl", "--alpha", "1234")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "alpha 1234.0 us")
}

// trace -o writes its Chrome trace like every other output: whole, 0644.
func TestTraceWritesItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.json")
	code, out, errs := meshrun(t, "", "trace", "../../examples/megatron_mlp.mesh", "-o", path)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "no pipeline axis")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, json.Valid(b))
}
