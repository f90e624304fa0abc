//go:build !amd64

package vecmath

// binaryVec does no element here (no vector kernel on this architecture).
func binaryVec(op byte, out, x, y []float32, xScalar, yScalar bool) int { return 0 }
