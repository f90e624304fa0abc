//go:build !amd64

package vecmath

// Gelu writes gelu(src[i]) to dst[i] (dst at least as long as src), one
// element at a time: no vector kernel on this architecture.
func Gelu(dst, src []float32) { geluScalar(dst[:len(src)], src, false) }

// GeluGrad writes gelu'(src[i]) to dst[i] (dst at least as long as src).
func GeluGrad(dst, src []float32) { geluScalar(dst[:len(src)], src, true) }
