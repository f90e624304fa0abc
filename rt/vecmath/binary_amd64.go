package vecmath

// binaryAVX (binary_amd64.s) runs Binary's loop on n elements, n a
// multiple of 8: x and y advance xinc and yinc bytes a step (0: a scalar
// operand, read from eight copies of it).
//
//go:noescape
func binaryAVX(out, x, y *float32, n, xinc, yinc int, op byte)

// binaryVec runs the vector kernel on the leading multiple of 8 elements
// and returns how many it did.
func binaryVec(op byte, out, x, y []float32, xScalar, yScalar bool) int {
	n := len(out) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	var xs, ys [8]float32
	xp, yp, xinc, yinc := &x[0], &y[0], 32, 32
	if xScalar {
		xs = [8]float32{x[0], x[0], x[0], x[0], x[0], x[0], x[0], x[0]}
		xp, xinc = &xs[0], 0
	}
	if yScalar {
		ys = [8]float32{y[0], y[0], y[0], y[0], y[0], y[0], y[0], y[0]}
		yp, yinc = &ys[0], 0
	}
	binaryAVX(&out[0], xp, yp, n, xinc, yinc, op)
	return n
}
