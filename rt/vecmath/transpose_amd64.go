package vecmath

// transpose8x8 (transpose_amd64.s) writes the transpose of the 8×8 block
// at src (row stride lds elements) to dst (row stride ldd).
//
//go:noescape
func transpose8x8(dst *float32, ldd int, src *float32, lds int)
