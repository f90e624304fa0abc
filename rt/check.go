package rt

import (
	"fmt"
	"math"

	"github.com/meshrun/meshrun/ir"
)

// Diff is how far one output of a sharded run is from the reference.
type Diff struct {
	Name   string
	MaxAbs float64
	// MaxRel is normwise: MaxAbs / max|want|; +Inf when want is all zero
	// and got is not (no scale to be relative to).
	MaxRel float64
	At     int // flat index of the worst element
	OK     bool
	// Shapes says how the shapes differ when they do ("" otherwise).
	Shapes string
}

// RelErr prints MaxRel as check reports it; with an all-zero reference
// there is nothing to be relative to.
func (d Diff) RelErr() string {
	if math.IsInf(d.MaxRel, 1) {
		return "n/a (expected all zeros)"
	}
	return fmt.Sprintf("%.3g (normwise)", d.MaxRel)
}

// Tolerance is how far an element of a sharded run may be from the
// single-device run: |got − want| ≤ Atol + Rtol·|want| + Norm·max|want|.
// The normwise term is for half precision, whose partial values are
// rounded before they are summed (see DefaultTolerance).
type Tolerance struct{ Rtol, Atol, Norm float64 }

// UnitRoundoff is half the spacing of a dtype's floats at 1: the largest
// relative error of one rounding to nearest (0 for integers).
func UnitRoundoff(dt ir.DType) float64 {
	switch dt {
	case ir.F64:
		return 0x1p-53
	case ir.F32:
		return 0x1p-24
	case ir.BF16:
		return 0x1p-8
	case ir.F16:
		return 0x1p-11
	}
	return 0
}

// DefaultTolerance is check's tolerance for an output of dtype dt from a
// run on devices devices. f32 and f64 round partial values at a precision
// far finer than their tolerance, so fixed bounds serve. A half-precision
// output is rounded once on one device (relative error ≤ u) but, where its
// computation reduced partial values across devices, each of up to n
// partials was rounded to the half dtype first (error ≤ u·|partial|) before
// the f32 sum; a partial is not bounded by the result (1000.5 − 999.5), so
// the bound is normwise, with the output's largest magnitude standing for
// the partials': Rtol = 4u (both runs round once, with a margin of 2) and
// Norm = n·u, n the reduction length across devices — the number of
// devices, the most partials one element can be the sum of.
func DefaultTolerance(dt ir.DType, devices int) Tolerance {
	switch dt {
	case ir.F64:
		return Tolerance{Rtol: 1e-9, Atol: 1e-12}
	case ir.F32:
		return Tolerance{Rtol: 1e-4, Atol: 1e-5}
	case ir.BF16, ir.F16:
		u := UnitRoundoff(dt)
		return Tolerance{Rtol: 4 * u, Norm: float64(max(devices, 1)) * u}
	}
	return Tolerance{} // integers: exact
}

// OutputTolerance is check's tolerance for output name of graph g on
// devices devices: DefaultTolerance of the coarsest float dtype its value
// was computed in (an f32 output cast from an f16 matmul carries f16's
// rounding of partials), or of the output's own dtype.
func OutputTolerance(g *ir.Graph, name string, devices int) Tolerance {
	for _, o := range g.Outputs {
		if o.Name == name {
			return DefaultTolerance(ComputedIn(o.Value), devices)
		}
	}
	return DefaultTolerance(ir.F32, devices)
}

// ComputedIn is the coarsest float dtype among v and the values it is
// computed from (v's own dtype when v is an integer).
func ComputedIn(v *ir.Value) ir.DType {
	coarsest := v.Type.DType
	if !coarsest.IsFloat() {
		return coarsest
	}
	seen := map[*ir.Value]bool{v: true}
	stack := []*ir.Value{v}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x.Type.DType.IsFloat() && UnitRoundoff(x.Type.DType) > UnitRoundoff(coarsest) {
			coarsest = x.Type.DType
		}
		for _, a := range x.Args {
			if !seen[a] {
				seen[a] = true
				stack = append(stack, a)
			}
		}
	}
	return coarsest
}

// Override replaces the relative and absolute bounds the user gave
// (negative: not given). An absolute bound given replaces the normwise
// term as well: it is the whole allowance for elements near zero.
func (t Tolerance) Override(rtol, atol float64) Tolerance {
	if rtol >= 0 {
		t.Rtol = rtol
	}
	if atol >= 0 {
		t.Atol, t.Norm = atol, 0
	}
	return t
}

// String says the bounds, as check prints them.
func (t Tolerance) String() string {
	if t.Norm == 0 {
		return fmt.Sprintf("rtol %g, atol %g", t.Rtol, t.Atol)
	}
	if t.Atol == 0 {
		return fmt.Sprintf("rtol %g, atol %g·max|want|", t.Rtol, t.Norm)
	}
	return fmt.Sprintf("rtol %g, atol %g + %g·max|want|", t.Rtol, t.Atol, t.Norm)
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

// CompareTensors compares two tensors of one shape with NumPy's allclose.
func CompareTensors(got, want *Tensor, rtol, atol float64) Diff {
	return CompareWithin(got, want, Tolerance{Rtol: rtol, Atol: atol})
}

// CompareWithin compares two tensors of one shape under a tolerance.
func CompareWithin(got, want *Tensor, tol Tolerance) Diff {
	d := Diff{OK: true, At: -1}
	if !sameShape(got.Shape, want.Shape) {
		d.OK = false
		d.MaxAbs = math.Inf(1)
		d.Shapes = fmt.Sprintf("shape %s here, %s in the reference", ir.ShapeString(got.Shape), ir.ShapeString(want.Shape))
		return d
	}
	gv, wv := got.Float64s(), want.Float64s()
	scale := 0.0
	for _, w := range wv {
		if !math.IsNaN(w) && !math.IsInf(w, 0) {
			scale = math.Max(scale, math.Abs(w))
		}
	}
	atol := tol.Atol + tol.Norm*scale
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
		if diff > atol+tol.Rtol*math.Abs(wv[i]) {
			d.OK = false
		}
	}
	switch {
	case d.MaxAbs == 0:
	case scale > 0:
		d.MaxRel = d.MaxAbs / scale
	default:
		d.MaxRel = math.Inf(1)
	}
	return d
}
