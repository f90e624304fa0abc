package rt

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

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

// TransBLAS is a BLAS that reads either operand transposed: op(A) = Aᵀ
// when ta, A then stored k×m (lda ≥ m); op(B) = Bᵀ when tb, B stored n×k
// (ldb ≥ k). The matmul kernel hands lower's fused transposes (plan.Kernel
// TransA, TransB) to it; a BLAS without it gets the operand transposed
// into scratch first (transGemm).
type TransBLAS interface {
	SgemmT(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)
	DgemmT(ta, tb bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int)
}

// GonumBLAS is the pure-Go default.
type GonumBLAS struct{}

func (GonumBLAS) Name() string { return "gonum" }

// Describe says what a benchmark ran on.
func (GonumBLAS) Describe() string { return "gonum (pure Go, no BLAS library)" }

func (GonumBLAS) Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmHeavy.add(m, n, k)
	gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

func (GonumBLAS) Dgemm(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	gemmHeavy.add(m, n, k)
	gonum.Implementation{}.Dgemm(blas.NoTrans, blas.NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

func (GonumBLAS) SgemmT(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gemmHeavy.add(m, n, k)
	gonum.Implementation{}.Sgemm(gonumTrans(ta), gonumTrans(tb), m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

func (GonumBLAS) DgemmT(ta, tb bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	gemmHeavy.add(m, n, k)
	gonum.Implementation{}.Dgemm(gonumTrans(ta), gonumTrans(tb), m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

func gonumTrans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

var (
	defaultOnce sync.Once
	defaultBLAS BLAS
	defaultWhy  error // why OpenBLAS is not the default
)

// DefaultBLAS is OpenBLAS when libopenblas.so.0 can be loaded at run time;
// else meshrun's own SGEMM kernel in Go assembly (rt/asmgemm: AVX-512 or
// AVX2/FMA on amd64) with gonum's DGEMM, where the CPU runs it; else
// gonum. MESHRUN_BLAS=gonum or =asm picks one of those two.
func DefaultBLAS() BLAS {
	defaultOnce.Do(func() {
		v := os.Getenv("MESHRUN_BLAS")
		b, err := LoadOpenBLAS()
		if err == nil {
			defaultBLAS = b
			return
		}
		defaultWhy, defaultBLAS = err, GonumBLAS{}
		if b := asmBLAS(); b != nil && v != "gonum" {
			defaultBLAS = b
		}
	})
	return defaultBLAS
}

// DescribeBLAS names b's library, build and threads (for benchmarks, which
// must say which BLAS ran).
func DescribeBLAS(b BLAS) string {
	if d, ok := b.(interface{ Describe() string }); ok {
		return d.Describe()
	}
	return b.Name()
}

// OpenBLASHint is the command that installs OpenBLAS on Debian and Ubuntu
// (the pthread build: meshrun sets its thread count).
const OpenBLASHint = "apt-get install libopenblas0-pthread"

// GEMMHeavyFlops is how many floating-point operations the fallback GEMMs
// (gonum's, or meshrun's own) do in one process before meshrun says, once,
// that OpenBLAS is missing: about half a second at gonum's 10–20 GF/s, and
// nothing a small example or a test reaches.
const GEMMHeavyFlops = 1e10

// BLASNotice receives that message (standard error; tests swap it).
var BLASNotice io.Writer = os.Stderr

// gemmHeavy counts the fallback GEMMs' operations and speaks once.
var gemmHeavy = heavyCounter{limit: GEMMHeavyFlops, missing: openBLASMissing,
	using: func() string { return DescribeBLAS(DefaultBLAS()) }}

type heavyCounter struct {
	limit   int64
	missing func() (why string, ok bool) // ok: OpenBLAS is absent, not declined
	using   func() string                // the BLAS that runs instead
	flops   atomic.Int64
	once    sync.Once
}

func (h *heavyCounter) add(m, n, k int) {
	if h.flops.Add(2*int64(m)*int64(n)*int64(k)) < h.limit {
		return
	}
	h.once.Do(func() {
		if why, ok := h.missing(); ok {
			fmt.Fprintf(BLASNotice, "meshrun: this run is GEMM-heavy and runs on %s: %s\n", h.using(), why)
		}
	})
}

// openBLASMissing is true when OpenBLAS could not be loaded, not when
// MESHRUN_BLAS chose another BLAS; it says why, and when the library is
// absent, the command that installs it.
func openBLASMissing() (string, bool) {
	DefaultBLAS()
	switch {
	case defaultWhy == nil:
		return "", false
	case os.Getenv("MESHRUN_BLAS") == "gonum" || os.Getenv("MESHRUN_BLAS") == "asm":
		return "", false // asked for
	case errors.Is(defaultWhy, errNoOpenBLAS):
		return defaultWhy.Error() + "; OpenBLAS is faster: " + OpenBLASHint, true
	}
	return "OpenBLAS not used: " + defaultWhy.Error(), true
}

// errNoOpenBLAS: libopenblas.so.0 is not installed.
var errNoOpenBLAS = errors.New("libopenblas.so.0 not found")
