package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The ZeRO-3 example trains to the same bits when its data-parallel axis
// is called rows instead of dp: no axis name is special.
func TestZeroOnAnAxisNotNamedDP(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("../../examples/train/mlp_zero3.mesh")
	require.NoError(t, err)
	renamed := strings.Replace(string(src), "mesh M = [dp=4]", "mesh M = [rows=4]", 1)
	require.NotEqual(t, string(src), renamed)
	for _, f := range []string{"x.npy", "t.npy"} {
		abs, err := filepath.Abs("../../examples/train/" + f)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(abs, filepath.Join(dir, f)))
	}
	path := filepath.Join(dir, "rows.mesh")
	require.NoError(t, os.WriteFile(path, []byte(renamed), 0o644))

	code, out, errs := meshrun(t, "", "explain", path)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "reduce_scatter rows")
	code, _, errs = meshrun(t, "", "train", path, "--out", filepath.Join(dir, "rows"))
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", "../../examples/train/mlp_zero3.mesh", "--out", filepath.Join(dir, "dp"))
	require.Equal(t, ExitOK, code, errs)
	for _, p := range []string{"W1.npy", "W2.npy", "W3.npy", "W4.npy", "W5.npy", "W6.npy"} {
		a, err := os.ReadFile(filepath.Join(dir, "dp", p))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dir, "rows", p))
		require.NoError(t, err)
		require.Equal(t, a, b, p)
	}
}
