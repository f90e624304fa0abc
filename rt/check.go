package rt

import (
	"fmt"
	"math"
)

// Diff is how far one output of a sharded run is from the reference.
type Diff struct {
	Name   string
	MaxAbs float64
	MaxRel float64 // normwise: MaxAbs / max|want|
	At     int     // flat index of the worst element
	OK     bool
}

// Compare checks every output of got against want elementwise with
// |got - want| <= atol + rtol·|want| (NumPy's allclose).
func Compare(got, want *Result, rtol, atol float64) ([]Diff, error) {
	var out []Diff
	for i, name := range want.Names {
		g := got.Output(name)
		if g == nil {
			return nil, fmt.Errorf("output %s missing from the sharded run", name)
		}
		d := CompareTensors(g, want.Outputs[i], rtol, atol)
		d.Name = name
		out = append(out, d)
	}
	return out, nil
}

// CompareTensors compares two tensors of one shape.
func CompareTensors(got, want *Tensor, rtol, atol float64) Diff {
	d := Diff{OK: true, At: -1}
	if !sameShape(got.Shape, want.Shape) {
		d.OK = false
		d.MaxAbs = math.Inf(1)
		return d
	}
	gv, wv := got.Float64s(), want.Float64s()
	scale := 0.0
	for _, w := range wv {
		if !math.IsNaN(w) {
			scale = math.Max(scale, math.Abs(w))
		}
	}
	for i := range gv {
		diff := math.Abs(gv[i] - wv[i])
		if math.IsNaN(gv[i]) != math.IsNaN(wv[i]) {
			diff = math.Inf(1)
		} else if math.IsNaN(gv[i]) || gv[i] == wv[i] {
			diff = 0
		}
		if diff > d.MaxAbs {
			d.MaxAbs, d.At = diff, i
		}
		if diff > atol+rtol*math.Abs(wv[i]) {
			d.OK = false
		}
	}
	if d.MaxAbs > 0 {
		d.MaxRel = d.MaxAbs / math.Max(scale, 1e-300)
	}
	return d
}
