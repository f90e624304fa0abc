package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A checkpoint of an offloaded run holds the same consolidated tensors as
// one without offload (the host tier's blocks are assembled like the
// device's; on a pipeline each rank's host holds its stage's blocks):
// stopped with offload and resumed without it, the run ends bit for bit
// where the uninterrupted run without offload ends.
func TestOffloadCheckpointResumesWithoutOffload(t *testing.T) {
	for _, c := range []struct {
		example string
		params  []string
	}{
		{"mlp_offload.mesh", []string{"W1.npy", "b1.npy", "W2.npy", "W3.npy"}},
		{"mlp_offload_pipe.mesh", []string{"W1.npy", "b1.npy", "W2.npy", "W3.npy", "W4.npy"}},
	} {
		t.Run(c.example, func(t *testing.T) { resumeWithoutOffload(t, c.example, c.params) })
	}
}

func resumeWithoutOffload(t *testing.T, example string, params []string) {
	dir := t.TempDir()
	src := readFile(t, filepath.Join("../../examples/train", example))
	for _, f := range []string{"x.npy", "t.npy"} {
		b, err := os.ReadFile(filepath.Join("../../examples/train", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	with := writeFile(t, dir, "with.mesh", src)
	without := writeFile(t, dir, "without.mesh", strings.Replace(src, "    offload = optimizer\n", "", 1))
	require.NotEqual(t, readFile(t, with), readFile(t, without))
	ck := filepath.Join(dir, "ck")
	code, _, errs := meshrun(t, "", "train", with, "--save", ck, "--stop-at", "7")
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", without, "--resume", ck, "--out", filepath.Join(dir, "resumed"))
	require.Equal(t, ExitOK, code, errs)
	code, _, errs = meshrun(t, "", "train", without, "--out", filepath.Join(dir, "straight"))
	require.Equal(t, ExitOK, code, errs)
	for _, p := range params {
		a, err := os.ReadFile(filepath.Join(dir, "straight", p))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dir, "resumed", p))
		require.NoError(t, err)
		require.Equal(t, a, b, p)
	}
}
