package npy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files in testdata were written by NumPy (np.save, np.lib.format).
func TestReadsNumPyFiles(t *testing.T) {
	want := make([]float64, 24)
	for i := range want {
		want[i] = float64(i)
	}
	for _, f := range []string{"c_f64.npy", "fortran_f64.npy"} {
		h, data, err := ReadFile(filepath.Join("testdata", f))
		require.NoError(t, err, f)
		require.Equal(t, []int{2, 3, 4}, h.Shape)
		require.Equal(t, want, data, f)
	}
	h, data, err := ReadFile("testdata/i32.npy")
	require.NoError(t, err)
	require.Equal(t, "i32", h.DType())
	require.Equal(t, []int32{0, 1, 2, 3, 4, 5}, data)
	h, data, err = ReadFile("testdata/scalar_f32.npy")
	require.NoError(t, err)
	require.Equal(t, []int{}, h.Shape)
	require.Equal(t, []float32{2.5}, data)
	h, data, err = ReadFile("testdata/v2_i64.npy")
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1, 2, 3, 4}, data)
	_, _, err = ReadFile("testdata/big_endian.npy")
	require.ErrorContains(t, err, `unsupported .npy dtype ">f8"`)
}

func TestRoundTrip(t *testing.T) {
	for _, data := range []any{[]float32{1, 2, 3, 4, 5, 6}, []float64{1, 2, 3, 4, 5, 6}, []int32{1, 2, 3, 4, 5, 6}, []int64{1, 2, 3, 4, 5, 6}} {
		var b bytes.Buffer
		require.NoError(t, Write(&b, []int{2, 3}, data))
		require.Zero(t, (b.Len()-6*elemSize(data))%64, "data starts on a 64-byte boundary")
		path := filepath.Join(t.TempDir(), "a.npy")
		require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
		h, got, err := ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, []int{2, 3}, h.Shape)
		require.Equal(t, data, got)
	}
}

func elemSize(data any) int {
	switch data.(type) {
	case []float32, []int32:
		return 4
	}
	return 8
}

func TestRejectsGarbage(t *testing.T) {
	_, err := ReadHeader(bytes.NewReader([]byte("hello")))
	require.ErrorContains(t, err, "not a .npy file")
	_, err = ReadHeader(bytes.NewReader([]byte("\x93NUMPY\x01\x00\x05\x00{'de")))
	require.ErrorContains(t, err, "truncated")
	_, err = ReadHeader(bytes.NewReader(append([]byte("\x93NUMPY\x01\x00\x10\x00"), []byte("{'descr': 1}    ")...)))
	require.ErrorContains(t, err, "malformed")
}

func TestWriteFileLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, WriteFile(filepath.Join(dir, "x.npy"), []int{2}, []float64{1, 2}))
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1)
	require.Error(t, WriteFile(filepath.Join(dir, "x.npy"), []int{2}, []string{"a"}))
	entries, _ = os.ReadDir(dir)
	require.Len(t, entries, 1, "a failed write leaves the old file alone and no temp file")
}
