// Package npy reads and writes NumPy .npy files (format versions 1.0, 2.0
// and 3.0), little-endian, C order, for the dtypes meshrun stores: f4, f8,
// i4, i8.
//
// The header is a magic string, a version, a header length and a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded so that the data starts on a 64-byte boundary. The dict is parsed
// as the literal it is (dict.go), with exactly NumPy's three keys, each
// once; the shape's size is checked (package size) and compared with the
// file's length before any array is allocated.
package npy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"github.com/meshrun/meshrun/internal/atomicfile"
	"io"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/internal/regular"
	"github.com/meshrun/meshrun/internal/size"
)

// Header is what a .npy file says about its array.
type Header struct {
	Descr   string // '<f4', '<f8', '<i4', '<i8'
	Shape   []int
	Fortran bool // column-major data; ReadFile returns it in C order
	// dataOff is where the data starts: the bytes ReadHeader consumed.
	dataOff int64
}

var magic = []byte("\x93NUMPY")

// ReadHeader parses the header and leaves r at the first data byte.
func ReadHeader(r io.Reader) (*Header, error) {
	pre := make([]byte, 8)
	if _, err := io.ReadFull(r, pre); err != nil {
		return nil, fmt.Errorf("not a .npy file (too short)")
	}
	if !bytes.Equal(pre[:6], magic) {
		return nil, fmt.Errorf("not a .npy file (bad magic)")
	}
	var hlen, lenBytes int
	switch pre[6] {
	case 1:
		lenBytes = 2
	case 2, 3:
		lenBytes = 4
	default:
		return nil, fmt.Errorf("unsupported .npy version %d.%d", pre[6], pre[7])
	}
	b := make([]byte, lenBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("truncated .npy header")
	}
	if lenBytes == 2 {
		hlen = int(binary.LittleEndian.Uint16(b))
	} else {
		hlen = int(binary.LittleEndian.Uint32(b))
	}
	if hlen > 1<<20 {
		return nil, fmt.Errorf(".npy header too long (%d bytes)", hlen)
	}
	h := make([]byte, hlen)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, fmt.Errorf("truncated .npy header")
	}
	hd, err := parseDict(string(h))
	if err != nil {
		return nil, err
	}
	switch hd.Descr {
	case "<f4", "<f8", "<i4", "<i8":
	default:
		return nil, fmt.Errorf("unsupported .npy dtype %q (want little-endian f4, f8, i4 or i8)", hd.Descr)
	}
	if _, ok := size.Elements(hd.Shape); !ok {
		return nil, fmt.Errorf(".npy shape %s is too large (more than 2^40 elements)", shapeString(hd.Shape))
	}
	hd.dataOff = int64(8 + lenBytes + hlen)
	return hd, nil
}

// DType names the meshrun dtype of a descr: f32, f64, i32, i64.
func (h *Header) DType() string {
	switch h.Descr {
	case "<f4":
		return "f32"
	case "<f8":
		return "f64"
	case "<i4":
		return "i32"
	case "<i8":
		return "i64"
	}
	return h.Descr
}

// Numel is the number of elements (ReadHeader has checked that it is
// countable).
func (h *Header) Numel() int {
	n, _ := size.Elements(h.Shape)
	return n
}

// itemSize is the bytes per element of a supported descr.
func (h *Header) itemSize() int {
	if h.Descr == "<f4" || h.Descr == "<i4" {
		return 4
	}
	return 8
}

// checkLength compares the data the header promises with the bytes after
// it, so that a header claiming a large array is caught before the array
// is allocated. Extra bytes after the data are accepted, as NumPy does.
func (h *Header) checkLength(total int64) error {
	need, _ := size.Bytes(h.Shape, h.itemSize())
	if have := total - h.dataOff; have < int64(need) {
		return fmt.Errorf("truncated .npy data: shape %s of %s needs %d bytes, the file holds %d", shapeString(h.Shape), h.DType(), need, max(have, 0))
	}
	return nil
}

// shapeString renders a shape as meshrun's messages do: [3, 4].
func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// ReadFileHeader reads only the header of a file, and checks that the
// file is long enough for the array it describes. Only a regular file is
// opened (see package regular).
func ReadFileHeader(path string) (*Header, error) {
	f, n, err := regular.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := ReadHeader(bufio.NewReader(f))
	if err != nil {
		return nil, err
	}
	if err := h.checkLength(n); err != nil {
		return nil, err
	}
	return h, nil
}

// ReadFile reads a whole array from a regular file. data is []float32,
// []float64, []int32 or []int64 according to the header.
func ReadFile(path string) (*Header, any, error) {
	f, n, err := regular.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return Read(bufio.NewReader(f), n)
}

// Read reads a whole array from a stream of total bytes.
func Read(r io.Reader, total int64) (*Header, any, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return nil, nil, err
	}
	if err := h.checkLength(total); err != nil {
		return nil, nil, err
	}
	n := h.Numel()
	var data any
	switch h.Descr {
	case "<f4":
		data = make([]float32, n)
	case "<f8":
		data = make([]float64, n)
	case "<i4":
		data = make([]int32, n)
	case "<i8":
		data = make([]int64, n)
	default:
		return nil, nil, fmt.Errorf("unsupported .npy dtype %q", h.Descr)
	}
	if err := binary.Read(r, binary.LittleEndian, data); err != nil {
		return nil, nil, fmt.Errorf("truncated .npy data: %v", err)
	}
	if h.Fortran {
		switch d := data.(type) {
		case []float32:
			data = fortranToC(d, h.Shape)
		case []float64:
			data = fortranToC(d, h.Shape)
		case []int32:
			data = fortranToC(d, h.Shape)
		case []int64:
			data = fortranToC(d, h.Shape)
		}
		h.Fortran = false
	}
	return h, data, nil
}

// fortranToC reorders column-major data into row-major order.
func fortranToC[T any](in []T, shape []int) []T {
	out := make([]T, len(in))
	n := len(shape)
	fstride := make([]int, n) // column-major strides
	acc := 1
	for i := 0; i < n; i++ {
		fstride[i] = acc
		acc *= shape[i]
	}
	idx := make([]int, n)
	for i := range out {
		src := 0
		for k := 0; k < n; k++ {
			src += idx[k] * fstride[k]
		}
		out[i] = in[src]
		for k := n - 1; k >= 0; k-- {
			idx[k]++
			if idx[k] < shape[k] {
				break
			}
			idx[k] = 0
		}
	}
	return out
}

// Write encodes data ([]float32, []float64, []int32 or []int64) with shape
// as a version 1.0 .npy stream.
func Write(w io.Writer, shape []int, data any) error {
	var descr string
	switch data.(type) {
	case []float32:
		descr = "<f4"
	case []float64:
		descr = "<f8"
	case []int32:
		descr = "<i4"
	case []int64:
		descr = "<i8"
	default:
		return fmt.Errorf("npy: unsupported data type %T", data)
	}
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	sh := strings.Join(dims, ", ")
	if len(shape) == 1 {
		sh += ","
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, sh)
	total := len(magic) + 2 + 2 + len(hdr) + 1
	pad := (64 - total%64) % 64
	hdr += strings.Repeat(" ", pad) + "\n"
	bw := bufio.NewWriter(w)
	bw.Write(magic)
	bw.Write([]byte{1, 0})
	binary.Write(bw, binary.LittleEndian, uint16(len(hdr)))
	bw.WriteString(hdr)
	if err := binary.Write(bw, binary.LittleEndian, data); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteFile writes an array to path, through a temporary file of its own
// renamed into place, so that a failure never leaves a half-written file
// and concurrent writers into one directory never collide.
func WriteFile(path string, shape []int, data any) error {
	return atomicfile.Write(path, func(w io.Writer) error { return Write(w, shape, data) }, nil)
}
