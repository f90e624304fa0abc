package vecmath

import "math"

// Exp64 reduces x = (32m + j)·ln2/32 + r with |r| ≤ ln2/64 and returns
// 2^m · 2^(j/32) · e^r, e^r from its degree-5 Taylor polynomial (remainder
// r^6/720 < 3e-15). Results below e^-708 flush to 0 and above e^709 go to
// +Inf: outside f32's range either way, so callers rounding to f32 or
// summing exponentials of f32 values see no difference. ExpShifted runs
// the same operations on four float64 lanes (exp_amd64.s), so both give
// identical bits.
func Exp64(x float64) float64 {
	if !(x > -708) { // also NaN
		if x != x {
			return x
		}
		return 0
	}
	if x > 709 {
		return math.Inf(1)
	}
	const n = float64(len(exp2Tab))
	const shifter = 0x1.8p52 // adding it rounds to an integer (|x·n/ln2| < 2^51)
	kf := (x*(n/math.Ln2) + shifter) - shifter
	k := int64(kf)
	// kf·(ln2/n) is off by at most |x|·2^-52 ≈ 1.6e-13 at |x| = 709, and by
	// 2.3e-14 over f32's range, which bounds the reduction's error.
	r := x - kf*(math.Ln2/n)
	r2 := r * r // Estrin's scheme: a shorter dependency chain than Horner's
	p := (1 + r) + r2*((1.0/2+r*(1.0/6))+r2*(1.0/24+r*(1.0/120)))
	scale := math.Float64frombits(uint64(k>>5+1023) << 52) // m ∈ [-1022, 1022]
	return scale * exp2Tab[k&31] * p
}

// exp2Tab[j] = 2^(j/32), from package math once at start-up.
var exp2Tab = func() (t [32]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / 32)
	}
	return t
}()

// ExpShifted writes e[i] = Exp64(float64(x[i]) − shift): softmax's
// exponentials of one f32 row less its maximum (e at least as long as x).
// It was a tenth of the tiny GPT's step one element at a time (issue 10).
func ExpShifted(e []float64, x []float32, shift float64) {
	e = e[:len(x)]
	for i := expShiftedVec(e, x, shift); i < len(x); i++ {
		e[i] = Exp64(float64(x[i]) - shift)
	}
}
