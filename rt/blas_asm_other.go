//go:build !amd64

package rt

// asmBLAS: meshrun's own SGEMM kernels are amd64 only.
func asmBLAS() BLAS { return nil }
