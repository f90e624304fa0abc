package cuda

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// heldAfter reads the fake's lifecycle log: per kind (ctx, stream, blas),
// how many were made and not given back.
func heldAfter(t *testing.T, log string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	require.NoError(t, err)
	held := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		switch {
		case strings.HasPrefix(line, "+"):
			held[line[1:]]++
		case strings.HasPrefix(line, "-"):
			held[line[1:]]--
		}
	}
	for k, n := range held {
		if n == 0 {
			delete(held, k)
		}
	}
	return held
}

// TestOpenFailureGivesBackWhatItMade: an Open that fails part way (no
// stream, no cuBLAS handle, kernels that do not compile) releases the
// primary context, the stream and the handle it had made, and an Open
// that succeeds gives them all back at Close.
func TestOpenFailureGivesBackWhatItMade(t *testing.T) {
	fakeOnly(t)
	useDriver(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	t.Setenv("MESHRUN_FAKE_LIFECYCLE", log)
	t.Setenv("MESHRUN_CUDA_CACHE", filepath.Join(dir, "cache")) // empty: Open must compile
	for _, fail := range []string{"cuStreamCreate", "cublasCreate_v2", "nvrtcCompileProgram"} {
		t.Setenv("MESHRUN_FAKE_FAIL", fail)
		d, err := Open(0)
		require.Error(t, err, fail)
		require.Nil(t, d)
		require.Contains(t, err.Error(), strings.TrimSuffix(fail, "_v2"))
		require.Empty(t, heldAfter(t, log), "after a failing %s", fail)
	}
	t.Setenv("MESHRUN_FAKE_FAIL", "")
	d, err := Open(0)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"ctx": 1, "stream": 1, "blas": 1}, heldAfter(t, log))
	require.NoError(t, d.Close())
	require.Empty(t, heldAfter(t, log))
	require.NoError(t, d.Close(), "a second Close does nothing")
	require.Empty(t, heldAfter(t, log))
	// The fake destroys a context whose last holder let go, as the driver
	// does: using it again is an error, not a silent success.
	require.ErrorContains(t, d.Sync(), "CUDA_ERROR_INVALID_CONTEXT")
}

// TestFailedCopyInReturnsNoBuffer: a failed upload returns a nil
// rt.Buffer with its error, not a nil *Buf inside a non-nil interface.
func TestFailedCopyInReturnsNoBuffer(t *testing.T) {
	fakeOnly(t)
	be := newTestBackend(t)
	t.Setenv("MESHRUN_FAKE_FAIL", "cuMemAlloc_v2")
	b, err := be.CopyIn(hostTensor(ir.F32, []int{2, 2}, []float64{1, 2, 3, 4}))
	require.EqualError(t, err, "cuda: cuMemAlloc (16 bytes): CUDA_ERROR_OUT_OF_MEMORY (2)")
	require.True(t, b == nil, "got %#v", b)
}

// TestTotalMemory reads the device's memory without opening it.
func TestTotalMemory(t *testing.T) {
	fakeOnly(t)
	useDriver(t)
	t.Setenv("MESHRUN_FAKE_TOTAL_MEM", "1234567")
	n, err := TotalMemory(0)
	require.NoError(t, err)
	require.Equal(t, int64(1234567), n)
	_, err = TotalMemory(3)
	require.EqualError(t, err, "cuda: cuDeviceTotalMem (device 3): CUDA_ERROR_INVALID_DEVICE (101)")
}

// TestTF32Matmul: with TF32 on, an f32 matmul's operands lose all but 10
// mantissa bits before the products are summed in f32; off (the
// default), the same matmul is f32's. The operands are chosen so every
// sum is exact in f32: 1 + 2⁻¹² rounds down to 1 in TF32 (under half its
// ulp of 2⁻¹⁰), 1 + 3·2⁻¹¹ up to 1 + 2⁻⁹ (1.5 ulp).
func TestTF32Matmul(t *testing.T) {
	fakeOnly(t)
	be := newTestBackend(t)
	a := hostTensor(ir.F32, []int{2, 4}, []float64{
		1 + 1.0/4096, 1 + 1.0/4096, 1 + 1.0/4096, 1 + 1.0/4096,
		1 + 3.0/2048, 1 + 3.0/2048, 1, 1})
	b := hostTensor(ir.F32, []int{4, 1}, []float64{1, 1, 1, 1})
	k := &plan.Kernel{Op: "matmul", DType: ir.F32, Shape: []int{2, 1}, ArgDTypes: []ir.DType{ir.F32, ir.F32}}
	run := func() []float32 {
		r, err := be.Launch(context.Background(), k, []rt.Buffer{a, b}, nil, sbp.Block{})
		require.NoError(t, err)
		h, err := be.CopyOut(r)
		require.NoError(t, err)
		be.Free(r)
		return h.Data.([]float32)
	}
	require.Equal(t, []float32{4 + 1.0/1024, 4 + 3.0/1024}, run(), "f32 by default")
	be.SetTF32(true)
	require.Equal(t, "cuda (Fake GPU (host memory), sm_90, TF32 matmuls)", be.Name())
	require.Equal(t, []float32{4, 4 + 1.0/256}, run(), "TF32: 1+2⁻¹² → 1, 1+3·2⁻¹¹ → 1+2⁻⁹")
	be.SetTF32(false)
	require.Equal(t, []float32{4 + 1.0/1024, 4 + 3.0/1024}, run())
}
