// Package vecmath evaluates element-wise functions of f32 slices in
// float32 arithmetic, eight AVX2 lanes at a time, for rt's CPU kernels: gelu
// and its gradient, and Adam's moments and update (adam.go). Each has a
// scalar twin in Go that runs the same steps where AVX2 and FMA are
// missing and for the tail of a slice, and documents the assembly. This
// package has no cgo, which Go assembly needs (rt uses cgo).
//
// gelu and its gradient were a fifth to a third of the tiny GPT's training
// step (issue 10) evaluated one element at a time in float64 (rt's
// f32math.go, whose table lookups do not vectorise). The form here has no
// table and no data-dependent branch.
//
// The algorithm for gelu(x) = x·Φ(x) and gelu'(x) = Φ(x) + x·φ(x):
//
// With u = x²/2 and t = |x|/√2, the tail Q = Φ(−|x|) = ½erfc(t) is
// e^(−u)·½R(t), where R(t) = e^(t²)·erfc(t) is smooth and slowly varying
// (R(0) = 1, R ≈ 1/(t√π) for large t). With τ = 1/(1 + p·t), R = τ·P(τ) for
// a P smooth on τ ∈ (0, 1]: P is a degree-10 polynomial fitted for
// relative error (testdata/gelu_fit.py, 4.8e-9 over |x| ≤ 16, ½ folded
// in). e^(−u) needs u's rounding error kept: u is up to 128, and an error
// of 2^-24 relative in u is 2^-17 relative in e^(−u); so x² is split into
// its rounded value and the exact remainder (a fused multiply-add) and the
// remainder enters the reduced argument. e^(−u) = 2^n·e^r with
// |r| ≤ ln2/2, e^r from its degree-7 Taylor polynomial (remainder 5e-9),
// and 2^n applied as two halves, since 2^n alone leaves f32's normal
// range (n down to −185) before the product does: the result is rounded
// once, also when it is subnormal.
//
//	gelu(x)  = x·(1 − Q)  for x ≥ 0,  x·Q  below;
//	gelu'(x) = Φ(x) + x·φ(x) = 1 + e^(−u)·(x/√(2π) − ½R)  for x ≥ 0,
//	                           e^(−u)·(½R + x/√(2π))      below,
//
// the last one cancelling near x = −0.75, where its absolute error is what
// is bounded. Inputs are clamped to |x| ≤ 16, beyond which Q underflows in
// f32; adding x·0 (±0 for finite x) to gelu's negative side and to all of
// gelu' makes a NaN input NaN again and gives ±Inf what the float64
// formulas give: gelu(+Inf) = +Inf, NaN for gelu(−Inf) and gelu'(±Inf).
//
// Accuracy against float64 (math.Erfc), over every 1024th f32 and the
// edges (rt's TestF32MathULPs): gelu within 5 ULP; gelu' within 7 ULP or
// 2^-23 absolute (the cancellation near x = −0.75). Both include subnormal
// results, rounded once.
package vecmath

import "math"

const (
	geluP   = 0.6 // p in τ = 1/(1 + p·|x|/√2)
	geluP0  = 0.1692531257867813
	geluP1  = 0.16938218474388123
	geluP2  = 0.1369834840297699
	geluP3  = 0.09267666935920715
	geluP4  = -0.07360517978668213
	geluP5  = 0.206120103597641
	geluP6  = -0.6334549784660339
	geluP7  = 0.8105477094650269
	geluP8  = -0.5385145545005798
	geluP9  = 0.18834470212459564
	geluP10 = -0.02773326449096203
	geluMax = 16
	// ln2 split for the reduction: ln2Hi has 9 significant bits, so n·ln2Hi
	// is exact for |n| < 2^15.
	ln2Hi      = 0.693359375
	ln2Lo      = -2.12194440e-4
	invSqrt2Pi = 0.3989422804014327
)

// geluTerms returns, for x clamped to |x| ≤ 16, xc, the tail term
// h = ½R(|xc|/√2), e^r and the two halves of 2^n (e^(−xc²/2) = e^r·s1·s2).
func geluTerms(x float32) (xc, h, er, s1, s2 float32) {
	xc = min(max(x, -geluMax), geluMax)
	a := abs32(xc)
	tau := 1 / fma32(geluP/math.Sqrt2, a, 1)
	p := fma32(geluP10, tau, geluP9)
	p = fma32(p, tau, geluP8)
	p = fma32(p, tau, geluP7)
	p = fma32(p, tau, geluP6)
	p = fma32(p, tau, geluP5)
	p = fma32(p, tau, geluP4)
	p = fma32(p, tau, geluP3)
	p = fma32(p, tau, geluP2)
	p = fma32(p, tau, geluP1)
	p = fma32(p, tau, geluP0)
	h = tau * p
	hi := a * a
	lo := fma32(a, a, -hi) // a² − hi exactly
	uh, ul := hi*0.5, lo*0.5
	n := float32(math.RoundToEven(float64(-uh * math.Log2E)))
	r := fma32(n, -ln2Hi, -uh)
	r = fma32(n, -ln2Lo, r)
	r -= ul
	e := fma32(1.0/5040, r, 1.0/720)
	e = fma32(e, r, 1.0/120)
	e = fma32(e, r, 1.0/24)
	e = fma32(e, r, 1.0/6)
	e = fma32(e, r, 0.5)
	e = fma32(e, r, 1)
	er = fma32(e, r, 1)
	n1 := int32(n) >> 1
	n2 := int32(n) - n1
	s1 = math.Float32frombits(uint32(n1+127) << 23)
	s2 = math.Float32frombits(uint32(n2+127) << 23)
	return
}

// Gelu1 is gelu(x) by the float32 algorithm above.
func Gelu1(x float32) float32 {
	xc, h, er, s1, s2 := geluTerms(x)
	var y float32
	if xc >= 0 {
		q := (h * er * s1) * s2
		y = fma32(-xc, q, x)
	} else {
		y = (xc*h*er*s1)*s2 + x*0
	}
	return y
}

// GeluGrad1 is gelu'(x) by the float32 algorithm above.
func GeluGrad1(x float32) float32 {
	xc, h, er, s1, s2 := geluTerms(x)
	var y float32
	if xc >= 0 {
		e := (er * s1) * s2
		y = fma32(e, fma32(xc, invSqrt2Pi, -h), 1)
	} else {
		y = (fma32(xc, invSqrt2Pi, h) * er * s1) * s2
	}
	return y + x*0
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// fma32 is x·y + z rounded once to f32 (the exact product of two f32 fits
// in float64, and the sum rounded to float64 then to f32 differs from a
// single rounding only when it lands on a float64 tie, far rarer than the
// errors bounded here).
func fma32(x, y, z float32) float32 { return float32(math.FMA(float64(x), float64(y), float64(z))) }

// geluScalar is Gelu (grad: GeluGrad) one element at a time.
func geluScalar(dst, src []float32, grad bool) {
	if grad {
		for i, x := range src {
			dst[i] = GeluGrad1(x)
		}
		return
	}
	for i, x := range src {
		dst[i] = Gelu1(x)
	}
}
