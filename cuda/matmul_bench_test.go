package cuda

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// BenchmarkMatmulVsCublas times the backend's matmul as the runtime calls
// it (Launch: an output from the caching allocator, the GEMM, Free) against
// the raw cuBLAS GEMM into a buffer allocated once, on the same device
// and operands. Each round runs `reps` of one side then `reps` of the
// other, the order flipping every round, each side ending with a stream
// synchronisation; it reports backend/raw time as min, median and max
// over the rounds, and each side's best TFLOP/s, in f32, TF32 (f32 with
// SetTF32: the tensor cores), bf16 (f32 compute, the tensor cores) and
// f64. On the fake driver the
// shapes are small (also with MESHRUN_BENCH_SMALL=1, to try bench/gpu.sh
// on the fake) and the figures say nothing of a GPU (bench/gpu.sh runs it
// on one with MESHRUN_TEST_GPU=1).
func BenchmarkMatmulVsCublas(b *testing.B) {
	be := newTestBackend(b)
	shapes := [][3]int{{4096, 4096, 4096}, {8192, 1024, 4096}, {16 * 512, 768, 3072}}
	reps, rounds := 20, 7
	if !onGPU() || os.Getenv("MESHRUN_BENCH_SMALL") == "1" {
		shapes, reps, rounds = [][3]int{{64, 48, 32}}, 3, 5
	}
	for _, mode := range []string{"f32", "tf32", "bf16", "f64"} {
		dt := map[string]ir.DType{"f32": ir.F32, "tf32": ir.F32, "bf16": ir.BF16, "f64": ir.F64}[mode]
		be.SetTF32(mode == "tf32") // both sides: the raw GEMM is the device's too
		for _, s := range shapes {
			m, k, n := s[0], s[1], s[2]
			b.Run(fmt.Sprintf("%s_%dx%dx%d", mode, m, k, n), func(b *testing.B) {
				benchMatmul(b, be, dt, m, k, n, reps, rounds)
			})
		}
	}
	be.SetTF32(false)
}

func benchMatmul(b *testing.B, be *Backend, dt ir.DType, m, k, n, reps, rounds int) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, bb := randHost(rng, dt, m, k), randHost(rng, dt, k, n)
	da, err := be.CopyIn(a)
	require.NoError(b, err)
	db, err := be.CopyIn(bb)
	require.NoError(b, err)
	raw, err := be.Alloc(dt, []int{m, n})
	require.NoError(b, err)
	defer be.Free(da)
	defer be.Free(db)
	defer be.Free(raw)
	kern := &plan.Kernel{Op: "matmul", DType: dt, Shape: []int{m, n}, ArgDTypes: []ir.DType{dt, dt}, ArgShapes: [][]int{{m, k}, {k, n}}}
	args := []rt.Buffer{da, db}
	in := []sbp.Block{{Off: []int{0, 0}, Len: []int{m, k}}, {Off: []int{0, 0}, Len: []int{k, n}}}
	out := sbp.Block{Off: []int{0, 0}, Len: []int{m, n}}
	ctx := context.Background()
	backend := func() {
		for range reps {
			c, err := be.Launch(ctx, kern, args, in, out)
			require.NoError(b, err)
			be.Free(c)
		}
		require.NoError(b, be.Sync(ctx))
	}
	rawGemm := func() {
		for range reps {
			require.NoError(b, be.dev.rowMajorGemm(dt, m, n, k, 1, da.(*Buf).ptr, db.(*Buf).ptr, raw.(*Buf).ptr, 0, 0))
		}
		require.NoError(b, be.Sync(ctx))
	}
	backend() // warm-up: cuBLAS picks its kernels, the allocator its block
	rawGemm()
	var tBackend, tRaw []float64
	for range b.N {
		x, y := alternate(rounds, backend, rawGemm)
		tBackend, tRaw = append(tBackend, x...), append(tRaw, y...)
	}
	ratios := make([]float64, len(tBackend))
	for i := range ratios {
		ratios[i] = tBackend[i] / tRaw[i]
	}
	slices.Sort(ratios)
	flops := 2 * float64(m) * float64(k) * float64(n) * float64(reps)
	b.ReportMetric(ratios[0], "ratio-min")
	b.ReportMetric(ratios[len(ratios)/2], "ratio-median")
	b.ReportMetric(ratios[len(ratios)-1], "ratio-max")
	b.ReportMetric(flops/slices.Min(tBackend)/1e12, "backend-TFLOP/s")
	b.ReportMetric(flops/slices.Min(tRaw)/1e12, "cublas-TFLOP/s")
	b.Logf("%s %dx%dx%d on %s: backend/raw cuBLAS time min %.3f median %.3f max %.3f over %d rounds of %d; best %.2f vs %.2f TFLOP/s",
		dt, m, k, n, be.Name(), ratios[0], ratios[len(ratios)/2], ratios[len(ratios)-1], len(ratios), reps,
		flops/slices.Min(tBackend)/1e12, flops/slices.Min(tRaw)/1e12)
}

// alternate runs a and b rounds times, the order flipping every round
// (so drift on the machine falls on both alike), and returns each one's
// seconds per round.
func alternate(rounds int, a, b func()) (ta, tb []float64) {
	for r := range rounds {
		first, second := a, b
		if r%2 == 1 {
			first, second = b, a
		}
		t0 := time.Now()
		first()
		t1 := time.Now()
		second()
		t2 := time.Now()
		x, y := t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds()
		if r%2 == 1 {
			x, y = y, x
		}
		ta, tb = append(ta, x), append(tb, y)
	}
	return ta, tb
}

func randHost(rng *rand.Rand, dt ir.DType, r, c int) *rt.Tensor {
	t := rt.NewTensor(dt, []int{r, c})
	switch d := t.Data.(type) {
	case []float32:
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
	case []float64:
		for i := range d {
			d[i] = rng.NormFloat64()
		}
	case []uint16:
		for i := range d {
			d[i] = rt.F32ToBF16(float32(rng.NormFloat64()))
		}
	}
	return t
}
