package vecmath

import "math"

// expShiftedAVX2 (exp_amd64.s) is ExpShifted on n elements, n a multiple
// of 4, with c = &expConsts and tab = &exp2Tab.
//
//go:noescape
func expShiftedAVX2(e *float64, x *float32, n int, shift float64, c *[expConstLen]float64, tab *[32]float64)

// expConsts are Exp64's constants for the assembly, in the order its
// offsets name them; the last two slots hold the int32s 1023 (the
// exponent bias) and 31 (the table mask) in their low halves.
const expConstLen = 13

var expConsts = [expConstLen]float64{
	32 / math.Ln2, 0x1.8p52, math.Ln2 / 32, 1, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120,
	-708, 709, math.Inf(1), math.Float64frombits(1023), math.Float64frombits(31),
}

// expShiftedVec runs the vector kernel on the leading multiple of 4
// elements and returns how many it did.
func expShiftedVec(e []float64, x []float32, shift float64) int {
	n := len(x) &^ 3
	if !hasAVX2 || n == 0 {
		return 0
	}
	expShiftedAVX2(&e[0], &x[0], n, shift, &expConsts, &exp2Tab)
	return n
}
