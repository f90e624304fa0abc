package vecmath

// Binary writes out[i] = x[i] op y[i] for op '+', '-', '*' or '/', f32,
// where an operand marked scalar is its first element for every i (a
// tensor times a scalar: the loss gradient's scale, the learning rate).
// Go compiles the element loop to one scalar instruction per element (it
// does not vectorise); where AVX2 runs, eight lanes go at once
// (binary_amd64.s), each lane the same IEEE operation on f32 as the
// scalar one, so both paths give the same bits. It reports false, doing
// nothing, for any other op.
func Binary(op byte, out, x, y []float32, xScalar, yScalar bool) bool {
	switch op {
	case '+', '-', '*', '/':
	default:
		return false
	}
	n := len(out)
	if !xScalar {
		x = x[:n]
	}
	if !yScalar {
		y = y[:n]
	}
	k := binaryVec(op, out, x, y, xScalar, yScalar)
	binaryScalar(op, out[k:], x, y, xScalar, yScalar, k)
	return true
}

// binaryScalar does elements k.. of Binary, out already cut to them.
func binaryScalar(op byte, out, x, y []float32, xScalar, yScalar bool, k int) {
	at := func(s []float32, scalar bool, i int) float32 {
		if scalar {
			return s[0]
		}
		return s[k+i]
	}
	for i := range out {
		a, b := at(x, xScalar, i), at(y, yScalar, i)
		switch op {
		case '+':
			out[i] = a + b
		case '-':
			out[i] = a - b
		case '*':
			out[i] = a * b
		default:
			out[i] = a / b
		}
	}
}
