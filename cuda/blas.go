package cuda

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
)

// cuBLAS's enumerations (library_types.h, cublas_api.h).
const (
	cudaR32F    = 0
	cudaR64F    = 1
	cudaR16F    = 2
	cudaR16BF   = 14
	computeF32  = 68 // CUBLAS_COMPUTE_32F
	computeTF32 = 77 // CUBLAS_COMPUTE_32F_FAST_TF32: f32 operands rounded to TF32, f32 sums
	computeF64  = 70 // CUBLAS_COMPUTE_64F
	mathDefault = 0  // CUBLAS_DEFAULT_MATH: with COMPUTE_32F, full f32 (no TF32)
)

// gemmCall is one cuBLAS GEMM in column-major terms: C (m×n, ldc) =
// A (m×k, lda) · B (k×n, ldb), batch of them at strides sa, sb, sc
// elements (sa or sb 0: the same matrix for every batch).
type gemmCall struct {
	m, n, k       int
	a, b, c       uint64
	lda, ldb, ldc int
	sa, sb, sc    int64
	batch         int
	dtype         int
	compute       int
	double        bool // alpha and beta are doubles
}

var blasStatus = map[int]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func blasError(call string, rc int) error {
	if rc == 0 {
		return nil
	}
	name, ok := blasStatus[rc]
	if !ok {
		name = "unknown cublasStatus_t"
	}
	return &Error{Call: call, Code: rc, Name: name}
}

// rowMajorGemm computes, for each of batch matrices, row-major
// C (m×n) = A (m×k) · B (k×n), with the operands' batch strides in
// elements. cuBLAS is column-major, and a row-major matrix read
// column-major is its transpose, so it computes Cᵀ = Bᵀ·Aᵀ: B first, the
// dims swapped, no transposes. f32 is computed in f32 (CUBLAS_COMPUTE_32F,
// default math: no TF32 tensor cores), as on the CPU backend; bf16 and f16
// operands too, the result rounded once to their type (what the CPU does
// by widening, an f32 GEMM and narrowing; here on the tensor cores). With
// the device's TF32 mode on (Backend.SetTF32), f32 GEMMs run on the tensor
// cores too: CUBLAS_COMPUTE_32F_FAST_TF32, each operand rounded to TF32's
// 10 mantissa bits, the products summed in f32.
func (d *Device) rowMajorGemm(dt ir.DType, m, n, k, batch int, a, b, c uint64, sa, sb int64) error {
	g := gemmCall{m: n, n: m, k: k, a: b, b: a, c: c, lda: n, ldb: k, ldc: n,
		sa: sb, sb: sa, sc: int64(m * n), batch: batch}
	switch dt {
	case ir.F32:
		g.dtype, g.compute = cudaR32F, computeF32
		if d.tf32.Load() {
			g.compute = computeTF32
		}
	case ir.BF16:
		g.dtype, g.compute = cudaR16BF, computeF32
	case ir.F16:
		g.dtype, g.compute = cudaR16F, computeF32
	case ir.F64:
		g.dtype, g.compute, g.double = cudaR64F, computeF64, true
	default:
		return fmt.Errorf("cuda: no cuBLAS GEMM for %s here", dt)
	}
	d.blasMu.Lock()
	defer d.blasMu.Unlock()
	call := "cublasGemmEx"
	if batch > 1 {
		call = "cublasGemmStridedBatchedEx"
	}
	if err := blasError(call, blGemm(d.ctx, d.blas, &g)); err != nil {
		return fmt.Errorf("%w [%d×%d·%d×%d ×%d %s]", err, m, k, k, n, batch, dt)
	}
	return nil
}
