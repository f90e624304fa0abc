package rt

import (
	"math"

	"github.com/meshrun/meshrun/rt/vecmath"
)

// Transcendentals for f32 (and half, which computes in f32) tensors.
// math.Exp and math.Erf carry float64's full 53 bits and cost accordingly;
// an f32 result needs about 30 bits. These evaluate short polynomials in
// float64 registers (relative error ≈ 1e-13 before the final rounding), so
// rounding to f32 lands within 1 ULP of the correctly rounded value; the
// bounds are asserted in f32math_test.go and stated in spec.md. f64 tensors
// keep package math.

// exp64 is e^x to about 1e-13 relative (vecmath.Exp64, whose vector
// form softmax uses on whole rows): below e^-708 it is 0, above e^709
// +Inf, outside f32's range either way.
func exp64(x float64) float64 { return vecmath.Exp64(x) }

// widen64 is float64(x) by moving bits. amd64's CVTSS2SD writes only the low
// half of its register, so each element's conversion waits on whatever
// last wrote that register — in a kernel loop, the previous element's
// whole polynomial — which made tanh32 2.3× slower than this (measured in
// BenchmarkF32Math). Zeros, subnormals, ±Inf and NaN take the plain
// conversion.
func widen64(x float32) float64 {
	b := math.Float32bits(x)
	if e := b >> 23 & 0xff; e == 0 || e == 0xff {
		return float64(x)
	}
	return math.Float64frombits(uint64(b>>31)<<63 | (uint64(b&0x7fffffff)<<29 + (1023-127)<<52))
}

// exp32 is e^x rounded to f32: within 1 ULP (overflow and underflow to
// subnormals and 0 happen in the conversion, as IEEE rounding does).
func exp32(x float32) float32 { return float32(exp64(widen64(x))) }

// sigmoid32 is 1/(1+e^-x): no cancellation, so exp64's error carries over.
func sigmoid32(x float32) float32 { return float32(1 / (1 + exp64(-widen64(x)))) }

// tanh32 is tanh x within 1 ULP. Below |x| = 1/4 it sums the odd Taylor
// series to x^11 (the next term is < 3e-10 of the result): the form
// 1 − 2/(e^{2x}+1) would lose the small result to cancellation there.
func tanh32(x float32) float32 {
	v := widen64(x)
	t := math.Abs(v)
	if t < 0.25 {
		s := v * v
		return float32(v * (1 + s*(-1.0/3+s*(2.0/15+s*(-17.0/315+s*(62.0/2835+s*(-1382.0/155925)))))))
	}
	r := 1 - 2/(exp64(2*t)+1) // |x| ≥ 1/4: cancels at most a factor 3; NaN stays NaN
	return float32(math.Copysign(r, v))
}

// erf splits at t = 1/2: below it the Maclaurin series t·Σ c_n t^(2n)
// (c_n = 2/√π·(−1)^n/(n!(2n+1)); ten terms leave < 1e-13 of the result),
// above it erfc(t) = e^(−t²)·R(t) with R(t) = e^(t²)·erfc(t), which is
// smooth and slowly varying (≈ 1/(t√π)) where erfc itself spans 300 orders
// of magnitude, so the tail keeps its relative accuracy. R is a degree-9 Taylor polynomial about the centre of
// each of erfcSteps intervals of width erfcW covering [0, 21/2);
// erfc(21/2) < 1e-49 is 0 in f32. Narrow intervals and a low degree keep
// the polynomial's dependency chain short. erf uses R from erfcLo on. (gelu
// and its gradient on f32 are rt/vecmath's: float32 arithmetic without
// tables, eight lanes at a time.)
const (
	erfcLo    = 0.5
	erfcW     = 0.25
	erfcSteps = 42
	erfcDeg   = 9
)

var erfSmall = func() (c [10]float64) {
	f := 2 / math.SqrtPi // 2/√π·(−1)^n/n!
	for n := range c {
		c[n] = f / float64(2*n+1)
		f /= -float64(n + 1)
	}
	return c
}()

// erfcTaylor[i] are R's Taylor coefficients about c = (i+½)·erfcW. R solves
// R' = 2tR − 2/√π, so with t = c + h, (n+1)·a_{n+1} = 2c·a_n + 2·a_{n−1}
// (minus 2/√π for n = 0), from a_0 = erfc(c)·e^(c²) by package math at
// start-up. The recurrence's own solution grows like e^(2ch), at most
// e^2.6 here, which multiplies a_0's rounding error to about 2e-15.
var erfcTaylor = func() (tab [erfcSteps][erfcDeg + 1]float64) {
	for i := range tab {
		c := (float64(i) + 0.5) * erfcW
		a := &tab[i]
		a[0] = math.Erfc(c) * math.Exp(c*c)
		a[1] = 2*c*a[0] - 2/math.SqrtPi
		for n := 1; n < erfcDeg; n++ {
			a[n+1] = (2*c*a[n] + 2*a[n-1]) / float64(n+1)
		}
	}
	return tab
}()

// erfSeries is erf(t) for |t| < 1/2.
func erfSeries(t float64) float64 {
	s, c := t*t, &erfSmall
	s2 := s * s
	s4 := s2 * s2
	p := (c[0] + c[1]*s) + s2*(c[2]+c[3]*s) + s4*((c[4]+c[5]*s)+s2*(c[6]+c[7]*s)) + s4*s4*(c[8]+c[9]*s)
	return t * p
}

// erfcPos is erfc(t) for t ≥ 1/2 (and NaN for NaN).
func erfcPos(t float64) float64 { return exp64(-t*t) * erfcR(t) }

// erfcR is R(t) = e^(t²)·erfc(t) for t ≥ 0, 0 from 21/2 on (where
// erfc(t) is 0 in f32 and in exp64), NaN for NaN.
func erfcR(t float64) float64 {
	if !(t < erfcSteps*erfcW) {
		if t != t {
			return t
		}
		return 0
	}
	i := int(t * (1 / erfcW))
	h := t - (float64(i)+0.5)*erfcW
	a := &erfcTaylor[i]
	// Estrin's scheme: four independent pairs, then powers of h, instead
	// of one chain of nine multiply-adds.
	h2 := h * h
	h4 := h2 * h2
	return (a[0] + a[1]*h) + h2*(a[2]+a[3]*h) + h4*((a[4]+a[5]*h)+h2*(a[6]+a[7]*h)) + h4*h4*(a[8]+a[9]*h)
}

// erf64 is erf(x) to about 1e-13 relative.
func erf64(x float64) float64 {
	t := math.Abs(x)
	if t < erfcLo {
		return erfSeries(x)
	}
	return math.Copysign(1-erfcPos(t), x)
}

// erf32 is erf x rounded to f32, within 1 ULP.
func erf32(x float32) float32 { return float32(erf64(widen64(x))) }
