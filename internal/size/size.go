// Package size is meshrun's one place for the arithmetic of tensor sizes:
// element counts and byte counts computed from shapes, with overflow
// caught instead of wrapped.
//
// A shape's element count is the product of its dims. Multiplying in int
// silently wraps past 2^63, and a wrapped count is worse than a crash: it
// can pass a size check, or come out as zero, and a program then computes
// with an array of the wrong size. Every product here is checked before it
// is formed (a*b > limit exactly when a > limit/b, for b > 0), and every
// count is held to MaxElements, so that later sums of byte counts — a
// device's peak memory adds up many tensors — stay far from the int64
// range too. The checker, lowering, the runtime and the file readers
// (.npy, safetensors) all size tensors through this package, so none of
// them can disagree with another about what fits.
package size

import "math"

// MaxElements is the largest element count of any tensor: 2^40, so a
// tensor of 8-byte elements is at most 8 TiB and a sum of up to 2^20 such
// byte counts still fits in an int64.
const MaxElements = 1 << 40

// Mul is a*b for a, b >= 0, or false when the product exceeds limit (or
// an operand is negative).
func Mul(a, b, limit int) (int, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	if b != 0 && a > limit/b {
		return 0, false
	}
	return a * b, true
}

// Elements is the element count of shape, or false when a dim is negative
// or the count exceeds MaxElements. A zero dim makes the count zero even
// after dims whose product alone would be too large (NumPy agrees: such an
// array holds nothing).
func Elements(shape []int) (int, bool) {
	n := 1
	over := false
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d == 0 {
			return 0, true
		}
		var ok bool
		if n, ok = Mul(n, d, MaxElements); !ok {
			over = true
			n = 1 // keep scanning: a later zero dim still empties the array
		}
	}
	if over {
		return 0, false
	}
	return n, true
}

// Bytes is the storage size of shape with elem-byte elements, or false as
// for Elements.
func Bytes(shape []int, elem int) (int, bool) {
	n, ok := Elements(shape)
	if !ok {
		return 0, false
	}
	return Mul(n, elem, math.MaxInt)
}

// AddBytes is a+b for byte counts a, b >= 0, saturating at math.MaxInt64:
// a sum that large is past any memory budget, and must not wrap below one.
func AddBytes(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
