package cuda

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
)

// TestNVRTCAcceptsTheKernels compiles the backend's whole program with a
// real NVRTC, which needs no GPU: the library search's (or
// MESHRUN_NVRTC_LIB's) NVRTC, skipping where there is none. It checks
// what the fake cannot: that NVRTC accepts the source with the backend's
// options and emits every kernel the backend launches, for Ampere and
// Hopper; and that a compile error comes back with NVRTC's log.
func TestNVRTCAcceptsTheKernels(t *testing.T) {
	if !haveDlopen {
		t.Skip("built without cgo: no dlopen")
	}
	if onGPU() {
		t.Skip("on a GPU every test compiles the kernels")
	}
	path, err := load(NVRTC, systemSearcher())
	if err != nil {
		t.Skipf("no NVRTC on this machine (set MESHRUN_NVRTC_LIB to one to run this): %v", err)
	}
	major, minor, rc := nvrtcVersion()
	require.Zero(t, rc)
	t.Logf("NVRTC %d.%d from %s", major, minor, path)
	for _, arch := range []string{"sm_80", "sm_90"} {
		image, log, rc := nvCompile(KernelSource(), "meshrun_kernels.cu", compileOptions(arch), false)
		require.Zero(t, rc, "%s: %s\n%s", arch, nvErrorString(rc), log)
		require.Empty(t, log, "%s: NVRTC has something to say", arch)
		require.True(t, bytes.HasPrefix(image, []byte("\x7fELF")), "a CUBIN is an ELF file")
		for _, name := range launchedKernels() {
			require.True(t, bytes.Contains(image, []byte(name+"\x00")), "%s: no kernel %s in the CUBIN", arch, name)
		}
		t.Logf("%s: %d bytes, %d kernels checked", arch, len(image), len(launchedKernels()))
	}
	// the PTX a GPU newer than this NVRTC gets (compile's fallback)
	archs, rc := nvSupportedArchs()
	require.Zero(t, rc)
	require.Contains(t, archs, 80, "NVRTC's own list of architectures")
	require.Equal(t, slices.Max(archs), newestKnownBelow("sm_1000"), "a GPU newer than all of them gets the newest")
	ptx, log, rc := nvCompile(KernelSource(), "meshrun_kernels.cu", compileOptions("compute_80"), true)
	require.Zero(t, rc, "compute_80: %s\n%s", nvErrorString(rc), log)
	require.True(t, bytes.HasSuffix(ptx, []byte{0}), "PTX ends in NUL, as cuModuleLoadData reads it")
	require.Contains(t, string(ptx), ".target sm_80")
	for _, name := range launchedKernels() {
		require.Contains(t, string(ptx), ".entry "+name+"(", "compute_80: no kernel %s in the PTX", name)
	}
	t.Logf("compute_80 PTX: %d bytes, %d kernels checked", len(ptx), len(launchedKernels()))
	_, log, rc = nvCompile("extern \"C\" __global__ void broken(float *x) { x[0] = undeclared; }", "broken.cu", compileOptions("sm_90"), false)
	require.NotZero(t, rc)
	require.Contains(t, log, "undeclared")
}

// launchedKernels names every kernel the backend may launch.
func launchedKernels() []string {
	var out []string
	for _, s := range []ir.DType{ir.F32, ir.F64} {
		ops := append(append([]string{}, BinaryOps...), UnaryOps...)
		ops = append(ops, "adam_moment", "adam_moment2", "adam_update", "adam_fused", "sum", "mean", "max", "mse", "softmax",
			"log_softmax", "layernorm", "softmax_grad", "normalize", "normalize_grad", "max_grad", "nonfinite", "where")
		for _, op := range ops {
			n, _ := KernelName(op, s)
			out = append(out, n)
		}
		for _, op := range []string{"embedding", "embedding_grad", "cross_entropy", "cross_entropy_grad"} {
			for _, it := range []ir.DType{ir.I32, ir.I64} {
				out = append(out, gatherName(op, s, it))
			}
		}
	}
	for _, b := range []string{"b2", "b4", "b8"} {
		out = append(out, "mr_copy_box_"+b, "mr_fill_"+b, "mr_copy_rows_"+b)
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I32, ir.I64, ir.BF16, ir.F16} { // the collectives (comm.go)
		s, _ := elemSuffix(dt)
		out = append(out, "mr_reduce_rows_"+s, "mr_tree_reduce_"+s)
	}
	out = append(out, "mr_arange_f32", "mr_cast_f32_f64", "mr_cast_f64_f32")
	for _, h := range []string{"bf16", "f16"} {
		out = append(out, "mr_widen_"+h, "mr_narrow_"+h)
	}
	return out
}
