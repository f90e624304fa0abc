package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// TestFakeContractsWithoutFmadFalse: the kernels equal the CPU bit for bit
// only because NVRTC is told --fmad=false. The fake's NVRTC contracts
// a·b + c into fused multiply-adds when that option is missing, as NVRTC
// does, so dropping it from compileOptions makes Adam's kernels differ
// from the CPU here too, and the backend tests would catch it.
func TestFakeContractsWithoutFmadFalse(t *testing.T) {
	fakeOnly(t)
	t.Setenv("MESHRUN_CUDA_CACHE", t.TempDir())
	opts := compileOptions
	t.Cleanup(func() { compileOptions = opts })
	compileOptions = func(arch string) []string {
		return slices.DeleteFunc(opts(arch), func(o string) bool { return o == "--fmad=false" })
	}
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		shape := []int{300}
		m, g := randTensor(rng, dt, shape), randTensor(rng, dt, shape)
		k := &plan.Kernel{Op: "adam_moment", DType: dt, Shape: shape}
		args := []*rt.Tensor{m, g, hostTensor(dt, nil, []float64{0.9})}
		require.NotEqual(t, cpuCompute(t, k, args...).Data, launch(t, be, k, args...).Data,
			"%s: beta·m + (1 − beta)·g contracted into an FMA", dt)
	}
}
