package rt

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/meshrun/meshrun/internal/atomicfile"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/meshrun/meshrun/ir"
)

// Checkpoints are safetensors files (the Hugging Face format: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the raw little-endian data). meshrun writes
// them consolidated — whole logical tensors, not per-device shards — so a
// checkpoint saved on one mesh and placement loads on any other.

var safeDTypes = map[ir.DType]string{ir.F32: "F32", ir.F64: "F64", ir.I32: "I32", ir.I64: "I64", ir.BF16: "BF16", ir.F16: "F16"}

type safeEntry struct {
	DType   string `json:"dtype"`
	Shape   []int  `json:"shape"`
	Offsets [2]int `json:"data_offsets"`
}

// WriteSafetensors writes tensors (by name) and string metadata.
func WriteSafetensors(w io.Writer, tensors map[string]*Tensor, meta map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	off := 0
	for _, n := range names {
		t := tensors[n]
		dt, ok := safeDTypes[t.DType]
		if !ok {
			return fmt.Errorf("safetensors: %s has unsupported dtype %s", n, t.DType)
		}
		size := int(t.Bytes())
		header[n] = safeEntry{DType: dt, Shape: append([]int{}, t.Shape...), Offsets: [2]int{off, off + size}}
		off += size
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 { // keep the data 8-byte aligned, as the format recommends
		h = append(h, ' ')
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(h))); err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for _, n := range names {
		if err := binary.Write(w, binary.LittleEndian, tensors[n].Data); err != nil {
			return err
		}
	}
	return nil
}

// ReadSafetensors reads a whole file.
func ReadSafetensors(path string) (map[string]*Tensor, map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var hlen uint64
	if err := binary.Read(f, binary.LittleEndian, &hlen); err != nil {
		return nil, nil, fmt.Errorf("%s: not a safetensors file (too short)", path)
	}
	if hlen > 100<<20 {
		return nil, nil, fmt.Errorf("%s: safetensors header of %d bytes is too large", path, hlen)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, nil, fmt.Errorf("%s: truncated safetensors header", path)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return nil, nil, fmt.Errorf("%s: bad safetensors header: %v", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	meta := map[string]string{}
	out := map[string]*Tensor{}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("%s: bad metadata: %v", path, err)
			}
			continue
		}
		var e safeEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			return nil, nil, fmt.Errorf("%s: bad entry %s: %v", path, name, err)
		}
		var dt ir.DType
		for k, v := range safeDTypes {
			if v == e.DType {
				dt = k
			}
		}
		if dt == ir.Invalid {
			return nil, nil, fmt.Errorf("%s: %s has unsupported dtype %s", path, name, e.DType)
		}
		n := 1
		for _, d := range e.Shape {
			if d < 0 || n > math.MaxInt32 {
				return nil, nil, fmt.Errorf("%s: %s has a bad shape %s", path, name, ir.ShapeString(e.Shape))
			}
			n *= d
		}
		lo, hi := e.Offsets[0], e.Offsets[1]
		if lo < 0 || hi > len(data) || hi-lo != n*dt.Size() {
			return nil, nil, fmt.Errorf("%s: %s's data range [%d, %d) does not fit", path, name, lo, hi)
		}
		t := NewTensor(dt, e.Shape)
		if err := binary.Read(bytesReader(data[lo:hi]), binary.LittleEndian, t.Data); err != nil {
			return nil, nil, err
		}
		out[name] = t
	}
	return out, meta, nil
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func bytesReader(b []byte) io.Reader { return &sliceReader{b} }

// SaveCheckpoint writes DIR/checkpoint.safetensors through a temporary
// file of this save's own, synced and then renamed over the old one, so an
// interrupted save never replaces the last good checkpoint and concurrent
// runs saving into one directory never delete each other's files (a save
// killed midway leaves its hidden temporary file; nothing removes another
// process's). beforeRename, when set, runs between the write and the
// rename (tests use it to stall).
func SaveCheckpoint(dir string, tensors map[string]*Tensor, meta map[string]string, beforeRename func()) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(w io.Writer) error { return WriteSafetensors(w, tensors, meta) }
	return atomicfile.Write(filepath.Join(dir, "checkpoint.safetensors"), write, beforeRename)
}

// LoadCheckpoint reads DIR/checkpoint.safetensors.
func LoadCheckpoint(dir string) (map[string]*Tensor, map[string]string, error) {
	return ReadSafetensors(filepath.Join(dir, "checkpoint.safetensors"))
}
