package rt

import (
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// BLAS is the matrix-multiply interface the CPU backend calls: row-major
// C = alpha·A·B + beta·C with A [m×k], B [k×n], C [m×n].
type BLAS interface {
	Name() string
	Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
	Dgemm(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int)
}

// GonumBLAS is the pure-Go default.
type GonumBLAS struct{}

func (GonumBLAS) Name() string { return "gonum" }

func (GonumBLAS) Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

func (GonumBLAS) Dgemm(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	gonum.Implementation{}.Dgemm(blas.NoTrans, blas.NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

var (
	defaultOnce sync.Once
	defaultBLAS BLAS
)

// DefaultBLAS is OpenBLAS when libopenblas.so.0 can be loaded at run time
// (and MESHRUN_BLAS is not "gonum"), gonum otherwise.
func DefaultBLAS() BLAS {
	defaultOnce.Do(func() {
		defaultBLAS = GonumBLAS{}
		if b, err := LoadOpenBLAS(); err == nil {
			defaultBLAS = b
		}
	})
	return defaultBLAS
}
