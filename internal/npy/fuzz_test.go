package npy

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzRead feeds arbitrary bytes to the reader. It must never panic, hang
// or allocate more than the input can fill (checkLength), and an array it
// accepts must hold exactly the header's element count and survive a
// round trip through Write.
func FuzzRead(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.npy")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, c := range hostileHeaders {
		f.Add(npyBytes(c.dict, make([]byte, 16)))
	}
	f.Add(npyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (268435456,), }", make([]byte, 48)))
	f.Add(npyBytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", make([]byte, 24)))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if n := reflect.ValueOf(data).Len(); n != h.Numel() {
			t.Fatalf("shape %v but %d elements", h.Shape, n)
		}
		var out bytes.Buffer
		if err := Write(&out, h.Shape, data); err != nil {
			t.Fatal(err)
		}
		h2, data2, err := Read(bytes.NewReader(out.Bytes()), int64(out.Len()))
		if err != nil {
			t.Fatalf("re-reading what Write wrote: %v", err)
		}
		if !reflect.DeepEqual(h2.Shape, h.Shape) || !reflect.DeepEqual(data2, data) && !hasNaN(data) {
			t.Fatalf("round trip changed the array")
		}
	})
}

func hasNaN(data any) bool {
	switch d := data.(type) {
	case []float32:
		for _, x := range d {
			if x != x {
				return true
			}
		}
	case []float64:
		for _, x := range d {
			if x != x {
				return true
			}
		}
	}
	return false
}
