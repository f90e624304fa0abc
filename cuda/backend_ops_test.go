package cuda

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

func randTensor(rng *rand.Rand, dt ir.DType, shape []int) *rt.Tensor {
	x := make([]float64, numel(shape))
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return hostTensor(dt, shape, x)
}

func absTensor(t *rt.Tensor) *rt.Tensor {
	x := t.Float64s()
	for i := range x {
		x[i] = math.Abs(x[i])
	}
	return hostTensor(t.DType, t.Shape, x)
}

func cpuCompute(t *testing.T, k *plan.Kernel, args ...*rt.Tensor) *rt.Tensor {
	t.Helper()
	kk := *k
	kk.ArgDTypes, kk.ArgShapes = nil, nil
	for _, a := range args {
		kk.ArgDTypes, kk.ArgShapes = append(kk.ArgDTypes, a.DType), append(kk.ArgShapes, a.Shape)
	}
	cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
	out, err := cpu.Compute(&rt.OpCall{Kernel: &kk, Args: args})
	require.NoError(t, err)
	return out
}

// TestBackendMatmul covers each way the backend maps a matmul to cuBLAS:
// one GEMM (B without batch dims, A's batch folded into rows), one
// strided batched GEMM (batch dims whole or absent on each side), and a
// GEMM per batch (other broadcasts). Two GEMMs that sum in different
// orders differ by at most about k·ε·Σ|a||b| per element (ε the dtype's
// unit roundoff): the bound checked, with Σ|a||b| from the CPU on |A|, |B|.
func TestBackendMatmul(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(3, 4))
	cases := [][2][]int{
		{{5, 7}, {7, 3}},
		{{2, 3, 5, 7}, {7, 4}},
		{{3, 5, 7}, {3, 7, 4}},
		{{5, 7}, {3, 7, 4}},
		{{1, 5, 7}, {3, 7, 4}},
		{{2, 1, 5, 7}, {1, 3, 7, 4}},
		{{65, 130}, {130, 33}},
		{{0, 3}, {3, 2}},
		{{4, 0}, {0, 2}},
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		eps := math.Pow(2, -24)
		if dt == ir.F64 {
			eps = math.Pow(2, -53)
		}
		for _, c := range cases {
			a, b := randTensor(rng, dt, c[0]), randTensor(rng, dt, c[1])
			k := &plan.Kernel{Op: "matmul", DType: dt}
			want := cpuCompute(t, k, a, b)
			bound := cpuCompute(t, k, absTensor(a), absTensor(b)).Float64s()
			k.Shape = want.Shape
			got := launch(t, be, k, a, b)
			require.Equal(t, want.Shape, got.Shape)
			kk := c[0][len(c[0])-1]
			w, g := want.Float64s(), got.Float64s()
			for i := range w {
				tol := 2 * float64(kk+1) * eps * bound[i]
				require.InDelta(t, w[i], g[i], tol, "%s %v@%v [%d]", dt, c[0], c[1], i)
			}
		}
	}
	require.Empty(t, be.Fallbacks())
}

// TestBackendSliceEmbedReshape checks the data-movement kernels bit for
// bit against the CPU backend, for each element size.
func TestBackendSliceEmbedReshape(t *testing.T) {
	be := newTestBackend(t)
	cpu := &rt.CPU{}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.BF16, ir.I32, ir.I64} {
		for _, shape := range [][]int{{7}, {4, 6}, {3, 1, 5, 4}, {2, 3, 2, 3, 2, 3, 2, 3, 2}} {
			x := rt.NewTensor(dt, shape)
			fillRandom(rng, x)
			off, count, big, at := make([]int, len(shape)), make([]int, len(shape)), make([]int, len(shape)), make([]int, len(shape))
			for i, s := range shape {
				off[i] = rng.IntN(s)
				count[i] = 1 + rng.IntN(s-off[i])
				at[i] = rng.IntN(3)
				big[i] = s + at[i] + rng.IntN(2)
			}
			dx, err := be.CopyIn(x)
			require.NoError(t, err)
			what := fmt.Sprintf("%s %v", dt, shape)

			want, err := cpu.Slice(x, off, count)
			require.NoError(t, err)
			got, err := be.Slice(dx, off, count)
			require.NoError(t, err, what)
			requireSame(t, be, want, got, "slice "+what)

			for _, fill := range []rt.Fill{rt.FillZero, rt.FillNegInf} {
				want, err := cpu.Embed(x, big, at, fill)
				require.NoError(t, err)
				got, err := be.Embed(dx, big, at, fill)
				require.NoError(t, err, what)
				requireSame(t, be, want, got, fmt.Sprintf("embed %v fill %d", what, fill))
			}

			flat := []int{numel(shape)}
			k := &plan.Kernel{Op: "reshape", DType: dt, Shape: flat}
			got = launch(t, be, k, x)
			require.Equal(t, flat, got.Dims())
			require.Equal(t, x.Data, got.(*rt.Tensor).Data, "reshape "+what)
			be.Free(dx)
		}
	}
	// A slice out of bounds is an error, not a read past the buffer.
	x, err := be.Alloc(ir.F32, []int{4, 4})
	require.NoError(t, err)
	_, err = be.Slice(x, []int{2, 0}, []int{3, 4})
	require.EqualError(t, err, "cuda: slice of [4, 4] at [2 0] size [3 4] is out of bounds")
}

func fillRandom(rng *rand.Rand, x *rt.Tensor) {
	switch d := x.Data.(type) {
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
			d[i] = uint16(rng.Uint32())
		}
	case []int32:
		for i := range d {
			d[i] = int32(rng.Uint32())
		}
	case []int64:
		for i := range d {
			d[i] = int64(rng.Uint64())
		}
	}
}

func rawBits(t *rt.Tensor) string { return fmt.Sprintf("%v %v", t.Shape, t.Data) }

func requireSame(t *testing.T, be *Backend, want rt.Buffer, got rt.Buffer, what string) {
	t.Helper()
	g, err := be.CopyOut(got)
	require.NoError(t, err)
	w := want.(*rt.Tensor)
	require.Equal(t, w.Shape, g.Shape, what)
	// NaN ≠ NaN under ==: compare the bits through fmt of the raw slices
	// (-inf and zeros print distinctly, and no NaN is made here).
	require.Equal(t, rawBits(w), rawBits(g), what)
	be.Free(got)
}

// TestBackendFallback: an op without a CUDA kernel for its dtypes (cast
// from i64) runs on the CPU with the same numbers, is counted, and is
// announced once.
func TestBackendFallback(t *testing.T) {
	be := newTestBackend(t)
	var notes bytes.Buffer
	be.notify = &notes
	x := rt.NewTensor(ir.I64, []int{3, 5})
	fillRandom(rand.New(rand.NewPCG(7, 8)), x)
	k := &plan.Kernel{Op: "cast", DType: ir.F32, Shape: []int{3, 5}}
	want := cpuCompute(t, k, x)
	require.False(t, Native(&plan.Kernel{Op: "cast", DType: ir.F32, ArgDTypes: []ir.DType{ir.I64}}))
	for i := 0; i < 2; i++ {
		kk := *k
		got := launch(t, be, &kk, x)
		require.Equal(t, want.Data, got.Data)
	}
	require.Equal(t, map[string]int{"cast f32": 2}, be.Fallbacks())
	require.Equal(t, "meshrun: cuda: no CUDA kernel for cast (f32): it runs on the CPU backend, its arguments copied out and its result back\n", notes.String())
	// every op of the CPU backend has a CUDA kernel in f32 and f64
	require.Empty(t, FallbackOps())
}

// TestBackendHostArguments: the in-process collectives hand the backend
// host tensors (their results), and read its buffers through ReadHost.
func TestBackendHostArguments(t *testing.T) {
	be := newTestBackend(t)
	a := hostTensor(ir.F32, []int{2, 2}, []float64{1, 2, 3, 4})
	da, err := be.CopyIn(a)
	require.NoError(t, err)
	k := &plan.Kernel{Op: "add", DType: ir.F32, Shape: []int{2, 2}, ArgDTypes: []ir.DType{ir.F32, ir.F32}}
	out, err := be.Launch(context.Background(), k, []rt.Buffer{da, a}, nil, sbp.Block{})
	require.NoError(t, err)
	h, err := out.(rt.HostReader).ReadHost()
	require.NoError(t, err)
	require.Equal(t, []float32{2, 4, 6, 8}, h.Data)
}

// TestBackendConcurrentRanks: ranks sharing the backend call it from many
// OS threads at once; the fake driver refuses any call on a thread whose
// context is not current, so this checks that every call sets it. Each
// worker starts on a fresh thread with a launch (its inputs were uploaded
// by the test's thread and its output block is already in the allocator's
// cache), so the launch itself must make the context current.
func TestBackendConcurrentRanks(t *testing.T) {
	be := newTestBackend(t)
	const ranks, iters = 8, 20
	inputs := make([]rt.Buffer, ranks)
	for r := range inputs {
		x := hostTensor(ir.F64, []int{100}, make([]float64, 100))
		for i := range 100 {
			x.Data.([]float64)[i] = float64(r*1000 + i)
		}
		var err error
		inputs[r], err = be.CopyIn(x)
		require.NoError(t, err)
	}
	var warm []rt.Buffer // fill the cache: no allocation call on the workers' threads
	for range 2 * ranks {
		b, err := be.Alloc(ir.F64, []int{100})
		require.NoError(t, err)
		warm = append(warm, b)
	}
	for _, b := range warm {
		be.Free(b)
	}
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a fresh thread for each, never unlocked: it dies with the goroutine
			k := &plan.Kernel{Op: "mul", DType: ir.F64, Shape: []int{100}, ArgDTypes: []ir.DType{ir.F64, ir.F64}}
			for it := 0; it < iters && errs[r] == nil; it++ {
				y, err := be.Launch(context.Background(), k, []rt.Buffer{inputs[r], inputs[r]}, nil, sbp.Block{})
				if err != nil {
					errs[r] = err
					return
				}
				h, err := be.CopyOut(y)
				if err == nil && h.Data.([]float64)[99] != float64((r*1000+99)*(r*1000+99)) {
					err = fmt.Errorf("rank %d: got %v", r, h.Data.([]float64)[99])
				}
				errs[r] = err
				be.Free(y)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// The failures below are injected into the fake; a GPU cannot be made to
// fail on request, so they run on the fake only.
func fakeOnly(t *testing.T) {
	if onGPU() {
		t.Skip("injects failures into the fake driver")
	}
}

func TestBackendErrorsNameTheCall(t *testing.T) {
	fakeOnly(t)
	be := newTestBackend(t)
	t.Setenv("MESHRUN_FAKE_FAIL", "cuMemAlloc_v2,cublasGemmEx")
	_, err := be.Alloc(ir.F32, []int{1024})
	require.EqualError(t, err, "cuda: cuMemAlloc (4096 bytes): CUDA_ERROR_OUT_OF_MEMORY (2)")

	t.Setenv("MESHRUN_FAKE_FAIL", "cublasGemmEx")
	a := hostTensor(ir.F32, []int{2, 3}, []float64{1, 2, 3, 4, 5, 6})
	b := hostTensor(ir.F32, []int{3, 2}, []float64{1, 2, 3, 4, 5, 6})
	k := &plan.Kernel{Op: "matmul", DType: ir.F32, Shape: []int{2, 2}, ArgDTypes: []ir.DType{ir.F32, ir.F32}}
	_, err = be.Launch(context.Background(), k, []rt.Buffer{a, b}, nil, sbp.Block{})
	require.EqualError(t, err, "cuda: cublasGemmEx: CUBLAS_STATUS_EXECUTION_FAILED (13) [2×3·3×2 ×1 f32]")
}

// A matmul with an empty inner dim (a zeroed result, no GEMM) whose
// zeroing fails returns the error alone and gives its buffer back.
func TestBackendMatmulZeroFailureFreesTheResult(t *testing.T) {
	fakeOnly(t)
	be := newTestBackend(t)
	t.Setenv("MESHRUN_FAKE_FAIL", "cuMemsetD8_v2")
	a, b := rt.NewTensor(ir.F32, []int{2, 0}), rt.NewTensor(ir.F32, []int{0, 3})
	k := &plan.Kernel{Op: "matmul", DType: ir.F32, Shape: []int{2, 3}, ArgDTypes: []ir.DType{ir.F32, ir.F32}}
	held := func() int {
		be.dev.mu.Lock()
		defer be.dev.mu.Unlock()
		return len(be.dev.free[2*3*4])
	}
	before := held()
	r, err := be.Launch(context.Background(), k, []rt.Buffer{a, b}, nil, sbp.Block{})
	require.EqualError(t, err, "cuda: cuMemsetD8 (24 bytes): CUDA_ERROR_INVALID_VALUE (1)")
	require.Nil(t, r)
	require.Equal(t, before+1, held(), "the result's block is back in the cache")
}

// TestKernelCompileCache: the first Open compiles, the next finds the
// CUBIN on disk (even where NVRTC would now fail), and a compile error
// carries NVRTC's log.
func TestKernelCompileCache(t *testing.T) {
	fakeOnly(t)
	dir := t.TempDir()
	t.Setenv("MESHRUN_CUDA_CACHE", filepath.Join(dir, "cache"))
	t.Setenv("MESHRUN_FAKE_LOG", filepath.Join(dir, "log"))
	be := newTestBackend(t)
	require.Equal(t, "sm_90", be.Device().Arch)
	require.Equal(t, "cuda (Fake GPU (host memory), sm_90)", be.Name())
	files, err := filepath.Glob(filepath.Join(dir, "cache", "*-sm_90.cubin"))
	require.NoError(t, err)
	require.Len(t, files, 1)

	t.Setenv("MESHRUN_FAKE_FAIL", "nvrtcCompileProgram")
	_ = newTestBackend(t)
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	require.Equal(t, "compiled for sm_90\n", string(log), "one compilation for two opens")

	require.NoError(t, os.RemoveAll(filepath.Join(dir, "cache")))
	_, err = NewBackend(0, nil)
	require.Error(t, err)
	require.Equal(t, "cuda: nvrtcCompileProgram for sm_90: NVRTC_ERROR_COMPILATION (6):\nfake nvrtc: compilation failed on request (MESHRUN_FAKE_FAIL)", err.Error())
	require.True(t, strings.HasPrefix(err.Error(), "cuda: nvrtcCompileProgram"))
}

func TestChooseDevice(t *testing.T) {
	fakeOnly(t)
	useDriver(t) // one fake GPU
	for _, v := range append([]string{"MESHRUN_CUDA_DEVICE"}, localRankVars...) {
		t.Setenv(v, "")
	}
	n, err := ChooseDevice()
	require.NoError(t, err)
	require.Equal(t, 0, n)
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
	n, err = ChooseDevice()
	require.NoError(t, err)
	require.Equal(t, 0, n, "rank 3 of a host with one GPU")
	t.Setenv("MESHRUN_CUDA_DEVICE", "1")
	n, err = ChooseDevice()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the variable wins")
	_, err = NewBackend(n, nil)
	require.EqualError(t, err, "cuda: cuInit/cuDeviceGet/cuDevicePrimaryCtxRetain (device 1): CUDA_ERROR_INVALID_DEVICE (101)")
	t.Setenv("MESHRUN_CUDA_DEVICE", "gpu1")
	_, err = ChooseDevice()
	require.EqualError(t, err, `cuda: MESHRUN_CUDA_DEVICE="gpu1": want a device number (0, 1, ...)`)
}

// TestNVRTCTooOld: an NVRTC that does not know the device's architecture
// compiles PTX for the newest one it knows, which the driver JIT-compiles
// for the device (the fake's driver takes PTX of any older target); the
// backend says so and its kernels are still the CPU's bit for bit. The PTX
// is cached like a CUBIN. An NVRTC that knows no older architecture
// either says so, naming its version and file and how to choose another.
func TestNVRTCTooOld(t *testing.T) {
	fakeOnly(t)
	dir := t.TempDir()
	t.Setenv("MESHRUN_CUDA_CACHE", dir)
	t.Setenv("MESHRUN_FAKE_MAX_SM", "80")
	useDriver(t)
	var notes bytes.Buffer
	be, err := NewBackend(0, &notes)
	require.NoError(t, err)
	require.Equal(t, "PTX for compute_80, JIT-compiled by the driver for sm_90", be.Device().Code)
	require.Equal(t, "meshrun: NVRTC 13.0 does not know sm_90: its kernels are PTX for compute_80, JIT-compiled by the driver for sm_90 (a newer CUDA's NVRTC compiles for it directly)\n", notes.String())
	rng := rand.New(rand.NewPCG(31, 32))
	m, g := randTensor(rng, ir.F32, []int{50}), randTensor(rng, ir.F32, []int{50})
	k := &plan.Kernel{Op: "adam_moment", DType: ir.F32, Shape: []int{50}}
	args := []*rt.Tensor{m, g, hostTensor(ir.F32, nil, []float64{0.9})}
	require.Equal(t, cpuCompute(t, k, args...).Data, launch(t, be, k, args...).Data)
	require.NoError(t, be.Close())
	ptx, err := filepath.Glob(filepath.Join(dir, "*-compute_80.ptx"))
	require.NoError(t, err)
	require.Len(t, ptx, 1, "the PTX is cached")
	t.Setenv("MESHRUN_FAKE_FAIL", "nvrtcCompileProgram")
	be, err = NewBackend(0, nil)
	require.NoError(t, err, "found in the cache: NVRTC fails only for sm_90, which it does not know")
	require.NoError(t, be.Close())
	t.Setenv("MESHRUN_FAKE_FAIL", "")

	t.Setenv("MESHRUN_CUDA_CACHE", t.TempDir())
	t.Setenv("MESHRUN_FAKE_MAX_SM", "40")
	_, err = NewBackend(0, nil)
	require.Error(t, err)
	require.Equal(t, "cuda: nvrtcCompileProgram for sm_90: NVRTC_ERROR_INVALID_OPTION (5); NVRTC 13.0 ("+Path(NVRTC)+
		") may not know sm_90: use a newer one (CUDA 13's; MESHRUN_NVRTC_LIB names its file):\nnvrtc: error: invalid value for --gpu-architecture (-arch)", err.Error())
}
