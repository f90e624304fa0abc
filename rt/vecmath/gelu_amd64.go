package vecmath

import (
	"math"

	"github.com/meshrun/meshrun/rt/asmgemm"
)

// geluVecAVX2 and geluGradVecAVX2 (gelu_amd64.s) run gelu.go's
// algorithm on eight lanes with AVX2 and FMA: dst[i] = gelu(src[i]) or
// gelu'(src[i]) for i < n, n a multiple of 8. c is geluTable.
//
//go:noescape
func geluVecAVX2(dst, src *float32, n int, c *[geluTableLen][8]float32)

//go:noescape
func geluGradVecAVX2(dst, src *float32, n int, c *[geluTableLen][8]float32)

// geluTable holds the kernels' constants, each broadcast to a whole YMM
// register (AVX2's fused multiply-adds take no broadcast memory operand),
// in the order the assembly's offsets name them.
const geluTableLen = 28

var geluTable = func() (t [geluTableLen][8]float32) {
	bits := math.Float32frombits
	vals := [geluTableLen]float32{
		-geluMax, geluMax, bits(0x7fffffff), 1, geluP / math.Sqrt2, // 0..4
		geluP10, geluP9, geluP8, geluP7, geluP6, geluP5, // 5..10
		geluP4, geluP3, geluP2, geluP1, geluP0, // 11..15
		0.5, math.Log2E, ln2Hi, ln2Lo, // 16..19
		1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, // 20..24
		invSqrt2Pi, bits(127), 0, // 25..27 (127 as an int32 lane)
	}
	for i, v := range vals {
		for j := range t[i] {
			t[i][j] = v
		}
	}
	return t
}()

// hasAVX2 says whether the vector kernels run here (read once).
var hasAVX2 = asmgemm.AVX2.Supported()

// Gelu writes gelu(src[i]) to dst[i] (dst at least as long as src).
func Gelu(dst, src []float32) { gelu(dst, src, false) }

// GeluGrad writes gelu'(src[i]) to dst[i] (dst at least as long as src).
func GeluGrad(dst, src []float32) { gelu(dst, src, true) }

// gelu runs eight lanes at a time where the CPU has AVX2 and FMA, the
// scalar twin for the rest.
func gelu(dst, src []float32, grad bool) {
	dst = dst[:len(src)]
	n := 0
	if hasAVX2 {
		n = len(src) &^ 7
		if n > 0 {
			if grad {
				geluGradVecAVX2(&dst[0], &src[0], n, &geluTable)
			} else {
				geluVecAVX2(&dst[0], &src[0], n, &geluTable)
			}
		}
	}
	geluScalar(dst[n:], src[n:], grad)
}
