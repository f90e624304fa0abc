package rt

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// safeBytes builds a safetensors file from a header and data bytes.
func safeBytes(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

// hostileSafetensors are files each reader must reject: 16 bytes of data
// under headers that lie about them.
var hostileSafetensors = []struct{ header, err string }{
	// a and b share bytes [0, 8): resuming would read b's values as a's
	{`{"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, "a's data range [0, 16) overlaps b's"},
	{`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"b":{"dtype":"F64","shape":[1],"data_offsets":[4,12]}}`, "b's data range [4, 12) overlaps a's"},
	{`{"a":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}}`, "a's data range [0, 32) does not fit in 16 bytes of data"},
	{`{"a":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}}`, "leaves bytes [0, 8) unused"},
	{`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, "8 bytes of data after the last tensor"},
	{`{"a":{"dtype":"F64","shape":[2],"data_offsets":[-8,8]}}`, "a has data range [-8, 8), which does not hold its 16 bytes"},
	{`{"a":{"dtype":"F64","shape":[2],"data_offsets":[16,0]}}`, "a has data range [16, 0)"},
	{`{"a":{"dtype":"F32","shape":[4,1073741824,1073741824,1073741824],"data_offsets":[0,16]}}`, "a has a bad shape"},
	{`{"a":{"dtype":"F64","shape":[-2,-1],"data_offsets":[0,16]}}`, "a has a bad shape"},
	{`{"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, `"a" appears twice`},
	{`{"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, "a has unsupported dtype U8"},
	{`[1, 2]`, "not a JSON object"},
	{`{"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}`, "bad safetensors header"},
	{`{"a":{"dtype":"F64","shape":[2],"data_offsets":[0,99999999999999999999]}}`, "bad entry a"},
}

func TestHostileSafetensorsAreRejected(t *testing.T) {
	dir := t.TempDir()
	for _, c := range hostileSafetensors {
		b := safeBytes(c.header, make([]byte, 16))
		_, _, err := DecodeSafetensors(bytes.NewReader(b), int64(len(b)))
		require.ErrorContains(t, err, c.err, c.header)
		p := filepath.Join(dir, "x.safetensors")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		_, _, err = ReadSafetensors(p)
		require.ErrorContains(t, err, p+": ", c.header)
		require.ErrorContains(t, err, c.err, c.header)
	}
	// a header length past the file's end is refused before it is allocated
	b := safeBytes("{}", nil)
	binary.LittleEndian.PutUint64(b, 90<<20)
	_, _, err := DecodeSafetensors(bytes.NewReader(b), int64(len(b)))
	require.ErrorContains(t, err, "does not fit in a file of 10 bytes")
}

func TestSafetensorsEmptyTensorsShareAnOffset(t *testing.T) {
	h := `{"z":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"y":{"dtype":"F64","shape":[0],"data_offsets":[0,0]}}`
	b := safeBytes(h, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f})
	ts, _, err := DecodeSafetensors(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	require.Equal(t, []float64{1}, ts["a"].Data)
	require.Equal(t, []int{0, 3}, ts["z"].Shape)
	require.Len(t, ts, 3)
}

func TestSafetensorsOfANamedPipeFails(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "checkpoint.safetensors"), 0o644))
	done := make(chan error, 1)
	go func() {
		_, _, err := LoadCheckpoint(dir)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "is a named pipe, not a regular file")
	case <-time.After(10 * time.Second):
		t.Fatal("reading a named pipe hangs")
	}
}
