package npy

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// npyBytes builds a version 1.0 file from a header dict and data bytes.
func npyBytes(dict string, data []byte) []byte {
	var b bytes.Buffer
	b.Write(magic)
	b.Write([]byte{1, 0})
	binary.Write(&b, binary.LittleEndian, uint16(len(dict)))
	b.WriteString(dict)
	b.Write(data)
	return b.Bytes()
}

func writeNpy(t *testing.T, dict string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.npy")
	require.NoError(t, os.WriteFile(p, npyBytes(dict, data), 0o644))
	return p
}

// hostileHeaders are headers each reader must reject, with what it says.
var hostileHeaders = []struct{ dict, err string }{
	{"{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "key 'descr' appears twice (NumPy would silently use the last one"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'shape': (3,)}", "key 'shape' appears twice"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (4, 1073741824, 1073741824, 1073741824), }", "too large"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", "want a dim"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (-2,), }", "want a dim"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (3), }", "not a tuple"},
	{"{'descr': '<f8', 'fortran_order': False, }", "no 'shape' key"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "unknown key 'extra'"},
	{"{'descr': '<f8', 'fortran_order': 0, 'shape': (2,), }", "fortran_order must be True or False"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), } x", "after the dict"},
	{"{'descr': '<f8', 'fortran_order': False, 'shape': (2,)", "want \"}\""},
}

func TestHostileHeadersAreRejected(t *testing.T) {
	for _, c := range hostileHeaders {
		_, _, err := Read(bytes.NewReader(npyBytes(c.dict, make([]byte, 32))), int64(len(c.dict)+10+32))
		require.ErrorContains(t, err, c.err, c.dict)
		_, err = ReadFileHeader(writeNpy(t, c.dict, make([]byte, 32)))
		require.ErrorContains(t, err, c.err, c.dict)
	}
}

func TestHeaderVariantsNumPyWrites(t *testing.T) {
	for dict, shape := range map[string][]int{
		`{"descr":"<i4","fortran_order":False,"shape":(2,)}`:                    {2},
		"{'descr': '<i4', 'fortran_order': False, 'shape': (1L, 2L), }      \n": {1, 2},
		"{'shape': (), 'fortran_order': False, 'descr': '<i4'}":                 {},
	} {
		h, data, err := Read(bytes.NewReader(npyBytes(dict, make([]byte, 8))), int64(len(dict)+10+8))
		require.NoError(t, err, dict)
		require.Equal(t, shape, h.Shape, dict)
		require.Len(t, data, h.Numel(), dict)
	}
}

// A header that promises 2 GiB over 48 bytes of data fails before the
// array is allocated.
func TestShortDataFailsBeforeAllocating(t *testing.T) {
	p := writeNpy(t, "{'descr': '<f8', 'fortran_order': False, 'shape': (268435456,), }", make([]byte, 48))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := ReadFile(p)
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "truncated .npy data: shape [268435456] of f64 needs 2147483648 bytes, the file holds 48")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))
	_, err = ReadFileHeader(p)
	require.ErrorContains(t, err, "truncated .npy data")
}

// A named pipe with no writer would block open() forever; a device never
// ends. Both are refused without being read.
func TestNotARegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo.npy")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	done := make(chan error, 2)
	go func() {
		_, _, err := ReadFile(fifo)
		done <- err
		_, err = ReadFileHeader(fifo)
		done <- err
	}()
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			require.ErrorContains(t, err, "is a named pipe, not a regular file")
		case <-time.After(10 * time.Second):
			t.Fatal("reading a named pipe hangs")
		}
	}
	_, _, err := ReadFile("/dev/zero")
	require.ErrorContains(t, err, "/dev/zero is a device, not a regular file")
	_, _, err = ReadFile(t.TempDir())
	require.ErrorContains(t, err, "is a directory, not a regular file")
}
