package rt

import (
	"bytes"
	"os"
	"reflect"
	"testing"
)

// FuzzDecodeSafetensors feeds arbitrary bytes to the checkpoint reader. It
// must never panic or hang; what it accepts must have tensors whose data
// matches their shapes, and must survive a round trip through
// WriteSafetensors (which writes ranges that tile the data, as the reader
// requires).
func FuzzDecodeSafetensors(f *testing.F) {
	if b, err := os.ReadFile("testdata/hand.safetensors"); err == nil {
		f.Add(b)
	}
	for _, c := range hostileSafetensors {
		f.Add(safeBytes(c.header, make([]byte, 16)))
	}
	var w bytes.Buffer
	if err := WriteSafetensors(&w, map[string]*Tensor{"a": FromSlice([]int{2}, []float64{1, 2}), "b": FromSlice([]int{}, []int32{3})},
		map[string]string{"step": "1"}); err == nil {
		f.Add(w.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, meta, err := DecodeSafetensors(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		for name, x := range ts {
			if n := reflect.ValueOf(x.Data).Len(); n != x.Numel() {
				t.Fatalf("%s: shape %v but %d elements", name, x.Shape, n)
			}
		}
		var out bytes.Buffer
		if err := WriteSafetensors(&out, ts, meta); err != nil {
			t.Fatal(err)
		}
		ts2, _, err := DecodeSafetensors(bytes.NewReader(out.Bytes()), int64(out.Len()))
		if err != nil {
			t.Fatalf("re-reading what WriteSafetensors wrote: %v", err)
		}
		if len(ts2) != len(ts) {
			t.Fatalf("round trip: %d tensors, then %d", len(ts), len(ts2))
		}
		for name, x := range ts {
			if !reflect.DeepEqual(ts2[name].Shape, x.Shape) || !bytes.Equal(rawBytes(t, ts2[name]), rawBytes(t, x)) {
				t.Fatalf("round trip changed %s", name)
			}
		}
	})
}

// rawBytes is a tensor's little-endian encoding (NaNs compare by bits).
func rawBytes(t *testing.T, x *Tensor) []byte {
	var b bytes.Buffer
	if err := WriteSafetensors(&b, map[string]*Tensor{"x": x}, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
