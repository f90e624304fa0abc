package rt

import "github.com/meshrun/meshrun/rt/asmgemm"

// AsmBLAS is meshrun's own SGEMM (rt/asmgemm, a micro-kernel in Go
// assembly reading A in place over packed or in-place B panels) with
// gonum's DGEMM: the default where OpenBLAS is absent and the CPU has
// AVX-512F or AVX2 with FMA. On this project's machine it measured
// 0.8–1.5× OpenBLAS per call at the median by shape with the AVX-512
// kernel, 0.5–0.85× with the AVX2 one (against OpenBLAS's AVX-512
// kernels), and 15–30× gonum (bench/README.md, 2026-11-30 13:52).
type AsmBLAS struct{ k *asmgemm.Kernel }

// asmBLAS is the best kernel this CPU runs, or nil.
func asmBLAS() BLAS {
	for _, k := range []*asmgemm.Kernel{asmgemm.AVX512, asmgemm.AVX2} {
		if k.Supported() {
			return AsmBLAS{k}
		}
	}
	return nil
}

func (b AsmBLAS) Name() string { return "asm" }

// Describe names the micro-kernel.
func (b AsmBLAS) Describe() string {
	return "meshrun's own SGEMM (Go assembly, " + b.k.Name + " micro-kernel) and gonum's DGEMM"
}

func (b AsmBLAS) Sgemm(m, n, k int, a []float32, lda int, bm []float32, ldb int, c []float32, ldc int) {
	gemmHeavy.add(m, n, k)
	b.k.Sgemm(m, n, k, a, lda, bm, ldb, c, ldc)
}

func (b AsmBLAS) Dgemm(m, n, k int, a []float64, lda int, bm []float64, ldb int, c []float64, ldc int) {
	GonumBLAS{}.Dgemm(m, n, k, a, lda, bm, ldb, c, ldc)
}

// SgemmT reads a transposed operand in its packing (TransBLAS); DgemmT is
// gonum's.
func (b AsmBLAS) SgemmT(ta, tb bool, m, n, k int, a []float32, lda int, bm []float32, ldb int, c []float32, ldc int) {
	gemmHeavy.add(m, n, k)
	b.k.SgemmT(ta, tb, m, n, k, a, lda, bm, ldb, c, ldc)
}

func (b AsmBLAS) DgemmT(ta, tb bool, m, n, k int, a []float64, lda int, bm []float64, ldb int, c []float64, ldc int) {
	GonumBLAS{}.DgemmT(ta, tb, m, n, k, a, lda, bm, ldb, c, ldc)
}
