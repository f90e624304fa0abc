package rt

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/meshrun/meshrun/internal/atomicfile"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/meshrun/meshrun/internal/regular"
	"github.com/meshrun/meshrun/internal/size"
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

// ReadSafetensors reads a whole file, which must be a regular file.
func ReadSafetensors(path string) (map[string]*Tensor, map[string]string, error) {
	f, n, err := regular.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	ts, meta, err := DecodeSafetensors(bufio.NewReader(f), n)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, meta, nil
}

// maxSafeHeader bounds the JSON header.
const maxSafeHeader = 100 << 20

// DecodeSafetensors reads a safetensors stream of total bytes. It holds
// the file to the format's rules before it allocates a tensor: each name
// once, each dtype known, each shape countable (package size) and its
// byte range exactly the shape's size, and the ranges tiling the data
// section — in order of their starts, each begins where the previous one
// ends, and the last ends at the end of the file — so that no two tensors
// share bytes and none reads past the end.
func DecodeSafetensors(r io.Reader, total int64) (map[string]*Tensor, map[string]string, error) {
	var hlen uint64
	if err := binary.Read(r, binary.LittleEndian, &hlen); err != nil {
		return nil, nil, fmt.Errorf("not a safetensors file (too short)")
	}
	if hlen > maxSafeHeader || int64(hlen) > total-8 {
		return nil, nil, fmt.Errorf("safetensors header of %d bytes does not fit in a file of %d bytes (or is over %d)", hlen, total, maxSafeHeader)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, nil, fmt.Errorf("truncated safetensors header")
	}
	meta, entries, err := parseSafeHeader(hb)
	if err != nil {
		return nil, nil, err
	}
	dataLen := total - 8 - int64(hlen)
	if err := checkSafeRanges(entries, dataLen); err != nil {
		return nil, nil, err
	}
	data := make([]byte, dataLen)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, nil, fmt.Errorf("truncated safetensors data")
	}
	out := map[string]*Tensor{}
	for _, e := range entries {
		t := NewTensor(e.dtype, e.Shape)
		if err := binary.Read(bytesReader(data[e.Offsets[0]:e.Offsets[1]]), binary.LittleEndian, t.Data); err != nil {
			return nil, nil, err
		}
		out[e.name] = t
	}
	return out, meta, nil
}

// namedEntry is a header entry with its name and resolved dtype.
type namedEntry struct {
	safeEntry
	name  string
	dtype ir.DType
}

// parseSafeHeader reads the header's JSON object. encoding/json keeps the
// last of repeated keys; the object is walked token by token instead, so
// that a name given twice — two readers could take different tensors for
// it — is an error.
func parseSafeHeader(hb []byte) (map[string]string, []namedEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(hb))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("bad safetensors header: not a JSON object")
	}
	meta := map[string]string{}
	var entries []namedEntry
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("bad safetensors header: %v", err)
		}
		name := tok.(string) // object keys are strings
		if seen[name] {
			return nil, nil, fmt.Errorf("bad safetensors header: %q appears twice", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			if err := dec.Decode(&meta); err != nil {
				return nil, nil, fmt.Errorf("bad metadata: %v", err)
			}
			continue
		}
		e := namedEntry{name: name}
		if err := dec.Decode(&e.safeEntry); err != nil {
			return nil, nil, fmt.Errorf("bad entry %s: %v", name, err)
		}
		if e.dtype, err = e.check(); err != nil {
			return nil, nil, fmt.Errorf("%s %v", name, err)
		}
		entries = append(entries, e)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("bad safetensors header: %v", err)
	}
	return meta, entries, nil
}

// check resolves an entry's dtype and checks its shape against its range.
func (e *safeEntry) check() (ir.DType, error) {
	var dt ir.DType
	for k, v := range safeDTypes {
		if v == e.DType {
			dt = k
		}
	}
	if dt == ir.Invalid {
		return dt, fmt.Errorf("has unsupported dtype %s", e.DType)
	}
	n, ok := size.Bytes(e.Shape, dt.Size())
	if !ok {
		return dt, fmt.Errorf("has a bad shape %s", ir.ShapeString(e.Shape))
	}
	lo, hi := e.Offsets[0], e.Offsets[1]
	if lo < 0 || hi < lo || hi-lo != n {
		return dt, fmt.Errorf("has data range [%d, %d), which does not hold its %d bytes", lo, hi, n)
	}
	return dt, nil
}

// checkSafeRanges requires the entries' byte ranges to tile [0, dataLen).
func checkSafeRanges(entries []namedEntry, dataLen int64) error {
	// by start, and empty ranges before a range starting at the same byte
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i].Offsets, entries[j].Offsets
		return a[0] < b[0] || a[0] == b[0] && a[1] < b[1]
	})
	end, prev := 0, ""
	for _, e := range entries {
		lo, hi := e.Offsets[0], e.Offsets[1]
		switch {
		case lo < end:
			return fmt.Errorf("%s's data range [%d, %d) overlaps %s's", e.name, lo, hi, prev)
		case lo > end:
			return fmt.Errorf("%s's data range [%d, %d) leaves bytes [%d, %d) unused", e.name, lo, hi, end, lo)
		case int64(hi) > dataLen:
			return fmt.Errorf("%s's data range [%d, %d) does not fit in %d bytes of data", e.name, lo, hi, dataLen)
		}
		end, prev = hi, e.name
	}
	if int64(end) != dataLen {
		return fmt.Errorf("%d bytes of data after the last tensor", dataLen-int64(end))
	}
	return nil
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
