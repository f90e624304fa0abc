package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// child starts meshrun with args in a child process (see TestMain).
func child(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	a, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "MESHRUN_CLI_ARGS="+string(a))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	return cmd, &out
}

// Several processes train with checkpoints every step into one --save
// directory and write their parameters and outputs into one --out
// directory, all at once: every process succeeds, every file is whole and
// mode 0644, and no temporary file is left behind.
func TestConcurrentRunsShareOneDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	ck, out := filepath.Join(dir, "ck"), filepath.Join(dir, "out")
	ex := mustAbs(t, "../../examples/train/mlp_dp.mesh")
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 4 {
		c, o := child(t, "train", ex, "--save", ck, "--save-every", "1", "--out", out)
		cmds, outs = append(cmds, c), append(outs, o)
	}
	for range 3 {
		c, o := child(t, "run", mustAbs(t, "../../examples/megatron_mlp.mesh"), "--out", out)
		cmds, outs = append(cmds, c), append(outs, o)
	}
	for i, c := range cmds {
		require.NoError(t, c.Wait(), "process %d: %s", i, outs[i])
	}
	_, meta, err := rt.LoadCheckpoint(ck)
	require.NoError(t, err)
	require.Equal(t, "20", meta["step"])
	for _, f := range []string{"W.npy", "c.npy", "y.npy"} {
		_, _, err := npy.ReadFile(filepath.Join(out, f))
		require.NoError(t, err, f)
	}
	for _, d := range []string{ck, out} {
		entries, err := os.ReadDir(d)
		require.NoError(t, err)
		for _, e := range entries {
			require.False(t, strings.HasSuffix(e.Name(), ".tmp"), "temporary file %s left in %s", e.Name(), d)
			info, err := e.Info()
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o644), info.Mode().Perm(), e.Name())
		}
	}
}
