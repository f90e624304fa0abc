package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// plan writes its best strategy as a program that checks against one
// device and trains; its loads still find the data next to the original.
func TestPlanWritesARunnableProgram(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "best.mesh")
	code, stdout, stderr := meshrun(t, "", "plan", "../../examples/train/mlp_dp.mesh", "--devices", "4", "--top", "2", "-o", out)
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stdout, "parameters")
	require.Contains(t, stdout, "activations and other")
	require.Contains(t, stdout, "wrote the best strategy to "+out)
	src, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(src), "mesh ")
	code, stdout, stderr = meshrun(t, "", "check", out, "--devices", "4")
	require.Equal(t, ExitOK, code, stdout+stderr)
	require.Contains(t, stdout, "PASS")
	code, stdout, stderr = meshrun(t, "", "train", out, "--devices", "4")
	require.Equal(t, ExitOK, code, stdout+stderr)
	require.Contains(t, stdout, "trained steps 1 to")
}

// On the tiny GPT over fast pairs and slow links between them the best
// strategy adds a pipeline axis across the slow level and rewrites the
// train block's settings and checkpoint marks; the file still checks
// (trains on the mesh and on one device, every step compared). (On
// uniform links plain data parallelism wins since its gradients share
// one bucket.)
func TestPlanWritesAPipelinedGPT(t *testing.T) {
	out := filepath.Join(t.TempDir(), "gpt.mesh")
	code, stdout, stderr := meshrun(t, "", "plan", "../../examples/train/gpt/gpt.mesh", "--devices", "4", "--links", "2:1:300,*:20:10", "--top", "1", "-o", out)
	require.Equal(t, ExitOK, code, stderr)
	src, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(src), "pipeline pp=", stdout)
	require.Contains(t, string(src), "microbatches = ")
	code, stdout, stderr = meshrun(t, "", "check", out, "--devices", "4")
	require.Equal(t, ExitOK, code, stdout+stderr)
	require.Contains(t, stdout, "PASS")
}

// Bad flags are reported together, before any search.
func TestPlanBadFlags(t *testing.T) {
	ex := "../../examples/train/mlp_dp.mesh"
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no devices", []string{ex}, []string{"missing --devices N"}},
		{"zero devices", []string{ex, "--devices", "0"}, []string{"--devices 0: want 1 to"}},
		{"no file", []string{"--devices", "4"}, []string{"missing FILE"}},
		{"bad links", []string{ex, "--devices", "4", "--links", "8:1:300"}, []string{"the last SIZE"}},
		{"links not nested", []string{ex, "--devices", "4", "--links", "4:1:300,6:2:100,*:10:25"}, []string{"not a multiple of the previous level's 4"}},
		{"links bandwidth", []string{ex, "--devices", "4", "--links", "8:1:0,*:10:25"}, []string{"bandwidth > 0"}},
		{"top", []string{ex, "--devices", "4", "--top", "0"}, []string{"--top 0: want at least 1"}},
		{"tflops", []string{ex, "--devices", "4", "--tflops", "NaN"}, []string{"--tflops NaN: want a finite number"}},
		{"memory", []string{ex, "--devices", "4", "--memory", "lots"}, []string{"want a size such as 16GiB"}},
		{"out dir", []string{ex, "--devices", "4", "-o", "/nonexistent/dir/x.mesh"}, []string{"-o /nonexistent/dir/x.mesh: cannot write the file"}},
		{"several at once", []string{ex, "--top", "-1", "--links", "x"}, []string{"missing --devices N", "--top -1", "--links \"x\""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := meshrun(t, "", append([]string{"plan"}, tc.args...)...)
			require.Equal(t, ExitUsage, code)
			require.Empty(t, stdout)
			for _, w := range tc.want {
				require.Contains(t, stderr, w)
			}
		})
	}
	// a program error is reported at its line before the search
	bad := writeFile(t, t.TempDir(), "bad.mesh", "mesh M = [dp=2]\nparam W : f32[4, 4] {S(0)} = ones\ntrain {\n    loss = sum(W @ V)\n    optimizer = sgd(lr=0.1)\n}\n")
	code, stdout, stderr := meshrun(t, "", "plan", bad, "--devices", "4")
	require.Equal(t, ExitUsage, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "bad.mesh:4:")
}

// --placements rewrites the declared placements it improves, and the
// file it writes checks against one device (on links where tensor
// parallelism within fast pairs wins, so that there are placements over
// tp to improve).
func TestPlanPlacementsWritesACheckedProgram(t *testing.T) {
	out := filepath.Join(t.TempDir(), "refined.mesh")
	code, stdout, stderr := meshrun(t, "", "plan", "../../planner/testdata/badmlp.mesh", "--devices", "4", "--links", "2:1:300,*:20:10", "--top", "1", "--no-pipeline", "--placements", "-o", out)
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stdout, "W1 {B, S(0)} → {B, S(1)}")
	src, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(src), "param W1 : f32[256, 1024] {B, S(1)}")
	code, stdout, stderr = meshrun(t, "", "check", out, "--devices", "4")
	require.Equal(t, ExitOK, code, stdout+stderr)
	require.Contains(t, stdout, "PASS")
}
