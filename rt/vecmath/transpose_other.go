//go:build !amd64

package vecmath

// transpose8x8 is never called here (hasAVX2 is false off amd64).
func transpose8x8(dst *float32, ldd int, src *float32, lds int) {
	panic("vecmath: no vector transpose")
}

const hasAVX2 = false
