package rt

import (
	"context"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// idleBLAS multiplies nothing: with it a matmul's Launch costs only what
// the backend adds around the GEMM (issue 10, goal 5).
type idleBLAS struct{}

func (idleBLAS) Name() string { return "idle" }
func (idleBLAS) Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
}
func (idleBLAS) Dgemm(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
}

// BenchmarkMatmulLaunchCost is the fixed cost of a [256, 32] @ [32, 32]
// matmul launched on a rank's CPU backend and freed, as the runtime runs
// it, around a GEMM that does nothing: what BenchmarkMatmulBackendVsRawBLAS
// (bench/) sees as the backend's share, without the GEMM's noise. A cost
// in ns, for before/after runs of two test binaries in turn (bench/README.md,
// goal 5); nothing asserts it.
func BenchmarkMatmulLaunchCost(b *testing.B) {
	cpu := NewRankCPU(idleBLAS{})
	k := &plan.Kernel{Op: "matmul", DType: ir.F32, Shape: []int{256, 32},
		ArgDTypes: []ir.DType{ir.F32, ir.F32}, ArgShapes: [][]int{{256, 32}, {32, 32}}}
	args := []Buffer{NewTensor(ir.F32, []int{256, 32}), NewTensor(ir.F32, []int{32, 32})}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		y, err := cpu.Launch(ctx, k, args, nil, sbp.Block{})
		if err != nil {
			b.Fatal(err)
		}
		cpu.Free(y)
	}
}
