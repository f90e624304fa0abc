//go:build !amd64

package vecmath

// expShiftedVec does no element here (no vector kernel on this
// architecture): ExpShifted's scalar loop does all of them.
func expShiftedVec(e []float64, x []float32, shift float64) int { return 0 }
