package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/internal/atomicfile"
	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// TestMain lets a test run meshrun in a child process (the crash test
// kills it): MESHRUN_CLI_ARGS holds the arguments as JSON.
func TestMain(m *testing.M) {
	if args := os.Getenv("MESHRUN_CLI_ARGS"); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			os.Exit(3)
		}
		os.Exit(Main(a, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestResumeIsBitForBit(t *testing.T) {
	dir := t.TempDir()
	ex := "../../examples/train/mlp_dp.mesh"
	ck := filepath.Join(dir, "ck")
	code, out, errs := meshrun(t, "", "train", ex, "--save", ck, "--stop-at", "9")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "stopped after step 9 of 20")
	code, out, errs = meshrun(t, "", "train", ex, "--resume", ck, "--out", filepath.Join(dir, "resumed"), "--log", filepath.Join(dir, "resumed.log"))
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "trained steps 10 to 20")
	code, _, errs = meshrun(t, "", "train", ex, "--out", filepath.Join(dir, "straight"), "--log", filepath.Join(dir, "straight.log"))
	require.Equal(t, ExitOK, code, errs)
	for _, p := range []string{"W.npy", "c.npy"} {
		a, err := os.ReadFile(filepath.Join(dir, "straight", p))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dir, "resumed", p))
		require.NoError(t, err)
		require.Equal(t, a, b, "%s differs between a resumed and an uninterrupted run", p)
	}
	straight := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "straight.log"))), "\n")
	resumed := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "resumed.log"))), "\n")
	require.Len(t, resumed, 11)
	for i, line := range resumed {
		var a, b map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &a))
		require.NoError(t, json.Unmarshal([]byte(straight[9+i]), &b))
		require.Equal(t, b["step"], a["step"])
		require.Equal(t, b["loss"], a["loss"])
	}
}

// A checkpoint saved on [dp=4] with replicated parameters loads into the
// same model on [dp=2, tp=2] with split parameters and ZeRO-1 states.
func TestCheckpointLoadsOnAnotherMesh(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	src := readExample(t, "train/mlp_dp")
	other := strings.NewReplacer(
		"mesh M = [dp=4]", "mesh M = [dp=2, tp=2]",
		"{S(0)} = load", "{S(0), B} = load",
		"param W : f32[16, 4]  {B}", "param W : f32[16, 4]  {B, S(1)}",
		"param c : f32[4]      {B}", "param c : f32[4]      {B, S(0)}",
		"steps = 20", "steps = 20\n    zero = 1",
	).Replace(src)
	require.NotEqual(t, src, other)
	for _, f := range []string{"x.npy", "t.npy"} {
		require.NoError(t, os.Symlink(mustAbs(t, "../../examples/train/"+f), filepath.Join(dir, f)))
	}
	otherPath := writeFile(t, dir, "other.mesh", other)
	code, _, errs := meshrun(t, "", "train", "../../examples/train/mlp_dp.mesh", "--save", ck, "--stop-at", "12")
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", otherPath, "--resume", ck, "--out", filepath.Join(dir, "other"))
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", "../../examples/train/mlp_dp.mesh", "--out", filepath.Join(dir, "straight"))
	require.Equal(t, ExitOK, code, errs)
	for _, p := range []string{"W.npy", "c.npy"} {
		h, a, err := npy.ReadFile(filepath.Join(dir, "straight", p))
		require.NoError(t, err)
		_, b, err := npy.ReadFile(filepath.Join(dir, "other", p))
		require.NoError(t, err)
		d := rt.CompareTensors(rt.FromSlice(h.Shape, b), rt.FromSlice(h.Shape, a), 1e-5, 1e-6)
		require.True(t, d.OK, "%s: %g", p, d.MaxAbs)
	}
}

// TestKilledSaveKeepsTheLastGoodCheckpoint kills meshrun while it writes
// its second checkpoint (after the temporary file is written, before the
// rename): the first checkpoint must still be there and load.
func TestKilledSaveKeepsTheLastGoodCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	args, _ := json.Marshal([]string{"train", mustAbs(t, "../../examples/train/mlp_dp.mesh"), "--save", ck, "--save-every", "1"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "MESHRUN_CLI_ARGS="+string(args), "MESHRUN_TEST_SAVE_STALL=1")
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	// wait for the second save's temporary file: the first checkpoint is
	// in place (renamed), and a new temporary file exists
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := os.Stat(filepath.Join(ck, "checkpoint.safetensors"))
		tmps, _ := filepath.Glob(atomicfile.TempPattern(filepath.Join(ck, "checkpoint.safetensors")))
		if err == nil && len(tmps) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the child never started its second save")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	tensors, meta, err := rt.LoadCheckpoint(ck)
	require.NoError(t, err, "the last good checkpoint must survive")
	require.Equal(t, "1", meta["step"])
	require.Contains(t, tensors, "W")
	require.Contains(t, tensors, "W.exp_avg")
	// and it resumes
	code, out, errs := meshrun(t, "", "train", "../../examples/train/mlp_dp.mesh", "--resume", ck)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "trained steps 2 to 20")
}

// An f16 run whose first step overflows at the initial loss scale (and
// is skipped: no Adam step applied) saves applied = 0 at step 1; resumed
// there it must train as the uninterrupted run does. The resumed run
// used to take applied = 0 for "from the start" and count step 1 in
// Adam's bias corrections.
func TestResumeAfterASkippedF16StepIsBitForBit(t *testing.T) {
	dir := t.TempDir()
	ex := filepath.Join(dir, "f16.mesh")
	require.NoError(t, os.WriteFile(ex, []byte(`mesh M = [dp=2]
input x : f32[32, 16] {S(0)} = normal(0, 1)
input t : f32[32, 4] {S(0)} = normal(0, 1)
param W1 : f32[16, 32] {B} = normal(0, 0.25)
param W2 : f32[32, 4] {B} = normal(0, 0.2)
train {
    loss = mse(tanh(x @ W1) @ W2, t)
    optimizer = adam(lr=0.01)
    steps = 4
    precision = f16
}
`), 0o644))
	ck := filepath.Join(dir, "ck")
	code, _, errs := meshrun(t, "", "train", ex, "--save", ck, "--stop-at", "1")
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", ex, "--resume", ck, "--out", filepath.Join(dir, "resumed"), "--log", filepath.Join(dir, "resumed.log"))
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", ex, "--out", filepath.Join(dir, "straight"), "--log", filepath.Join(dir, "straight.log"))
	require.Equal(t, ExitOK, code, errs)
	straight := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "straight.log"))), "\n")
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(straight[0]), &first))
	require.Equal(t, true, first["skipped"], "step 1 overflows: %s", straight[0])
	for _, p := range []string{"W1.npy", "W2.npy"} {
		a, err := os.ReadFile(filepath.Join(dir, "straight", p))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dir, "resumed", p))
		require.NoError(t, err)
		require.Equal(t, a, b, "%s differs between a resumed and an uninterrupted run", p)
	}
}
