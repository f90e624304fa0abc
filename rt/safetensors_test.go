package rt

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// testdata/hand.safetensors was written by a few lines of Python from the
// format's description, not by this package.
func TestReadsAHandWrittenSafetensorsFile(t *testing.T) {
	ts, meta, err := ReadSafetensors("testdata/hand.safetensors")
	require.NoError(t, err)
	require.Equal(t, "5", meta["step"])
	require.Equal(t, []int{2, 3}, ts["a"].Shape)
	require.Equal(t, []float32{0, 1, 2, 3, 4, 5}, ts["a"].Data)
	require.Equal(t, []int64{7, -1}, ts["b"].Data)
}

func TestSafetensorsRoundTrip(t *testing.T) {
	in := map[string]*Tensor{
		"W":         FromSlice([]int{2, 2}, []float32{1, 2, 3, 4}),
		"W.exp_avg": FromSlice([]int{2, 2}, []float32{0.5, 0, -1, 2}),
		"x":         FromSlice([]int{3}, []float64{1e-300, 2, 3}),
		"i":         FromSlice([]int{}, []int32{9}),
	}
	dir := t.TempDir()
	require.NoError(t, SaveCheckpoint(dir, in, map[string]string{"step": "3"}, nil))
	out, meta, err := LoadCheckpoint(dir)
	require.NoError(t, err)
	require.Equal(t, "3", meta["step"])
	require.Len(t, out, len(in))
	for k, v := range in {
		require.Equal(t, v.Shape, out[k].Shape, k)
		require.Equal(t, v.Data, out[k].Data, k)
	}
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1, "no temporary file is left after a save")
}

func TestSafetensorsRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bad.safetensors")
	require.NoError(t, os.WriteFile(p, []byte("abc"), 0o644))
	_, _, err := ReadSafetensors(p)
	require.ErrorContains(t, err, "not a safetensors file")
	var b bytes.Buffer
	require.NoError(t, WriteSafetensors(&b, map[string]*Tensor{"a": FromSlice([]int{4}, []float64{1, 2, 3, 4})}, nil))
	require.NoError(t, os.WriteFile(p, b.Bytes()[:b.Len()-8], 0o644))
	_, _, err = ReadSafetensors(p)
	require.ErrorContains(t, err, "does not fit")
}
