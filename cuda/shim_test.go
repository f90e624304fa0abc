package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// buildFake compiles C source into a shared library with the system C
// compiler, or skips the test saying why.
func buildFake(t *testing.T, name, src string) string {
	t.Helper()
	if !haveDlopen {
		t.Skip("built without cgo: no dlopen")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build a fake library")
	}
	dir := t.TempDir()
	c := filepath.Join(dir, name+".c")
	so := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(c, []byte(src), 0o644))
	out, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, c).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return so
}

// stubs defines every entry point of lib the shim needs, except those in
// skip, as a function returning 0.
func stubs(lib Lib, skip ...string) string {
	var b strings.Builder
	for _, name := range entryPoints()[lib] {
		if !contains(skip, name) {
			fmt.Fprintf(&b, "int %s(void) { return 0; }\n", name)
		}
	}
	return b.String()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func overrideOnly(env, path string) searcher {
	s := systemSearcher()
	s.getenv = func(k string) string {
		if k == env {
			return path
		}
		return ""
	}
	return s
}

// The fake NCCL folds the 128 bytes of the id it receives by value, so a
// wrong calling convention (the id's address passed instead of its bytes,
// or a truncated copy) gives a different number.
const fakeNCCL = `
#include <stdint.h>
typedef struct { char internal[128]; } id_t128;
int ncclGetVersion(int *v) { *v = 22703; return 0; }
int ncclGetUniqueId(id_t128 *id) { for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7 + 3); return 0; }
int ncclCommInitRank(void **comm, int nranks, id_t128 id, int rank) {
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < 128; i++) h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ull;
	*comm = (void *)(uintptr_t)(h ^ ((uint64_t)nranks << 40) ^ ((uint64_t)rank << 48));
	return rank == nranks ? 4 : 0; /* ncclInvalidArgument for a rank out of range */
}
const char *ncclGetErrorString(int code) { return code == 4 ? "invalid argument" : "other"; }
`

func TestFakeNCCLThroughShim(t *testing.T) {
	so := buildFake(t, "libnccl.so.2", fakeNCCL+stubs(NCCL, "ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclGetErrorString"))
	path, err := load(NCCL, overrideOnly("MESHRUN_NCCL_LIB", so))
	require.NoError(t, err)
	require.Equal(t, so, path)

	v, rc := ncclVersion()
	require.Equal(t, 0, rc)
	require.Equal(t, 22703, v)

	var id UniqueID
	require.Equal(t, 0, ncclGetUniqueID(&id))
	for i := range id {
		require.Equal(t, byte(i*7+3), id[i], "byte %d", i)
	}
	// A different id, so the check does not depend on GetUniqueID.
	for i := range id {
		id[i] = byte(255 - i)
	}
	comm, rc := ncclCommInitRank(4, &id, 2)
	require.Equal(t, 0, rc)
	h := uint64(1469598103934665603)
	for _, b := range id {
		h = (h ^ uint64(b)) * 1099511628211
	}
	require.Equal(t, uintptr(h^4<<40^2<<48), comm)

	_, rc = ncclCommInitRank(4, &id, 4)
	require.Equal(t, 4, rc)
	require.Equal(t, "cuda: ncclCommInitRank: invalid argument (ncclResult 4)", ncclError("ncclCommInitRank", rc).Error())
}

func TestFakeDriverThroughShim(t *testing.T) {
	so := buildFake(t, "libcuda.so.1", "int cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n"+stubs(Driver, "cuDriverGetVersion"))
	_, err := load(Driver, overrideOnly("MESHRUN_CUDA_LIB", filepath.Dir(so)))
	require.NoError(t, err)
	v, rc := driverVersion()
	require.Equal(t, 0, rc)
	require.Equal(t, 13000, v)
}

func TestLibraryMissingAnEntryPoint(t *testing.T) {
	so := buildFake(t, "libnvrtc.so.13", "int nvrtcVersion(int *a, int *b) { *a = 13; *b = 0; return 0; }\n")
	_, err := load(NVRTC, overrideOnly("MESHRUN_NVRTC_LIB", so))
	require.EqualError(t, err, "cuda: cannot load NVRTC: tried "+so+
		" (loads, but has no nvrtcCreateProgram); MESHRUN_NVRTC_LIB is set, so nothing else was tried")
}

// TestDefaultSearchNamesEveryFile runs the real search with this machine's
// environment; where NVRTC is installed there is nothing to check.
func TestDefaultSearchNamesEveryFile(t *testing.T) {
	if !haveDlopen {
		t.Skip("built without cgo: no dlopen")
	}
	s := systemSearcher()
	if _, err := load(NVRTC, s); err == nil {
		t.Skip("NVRTC is installed here")
	} else {
		msg := err.Error()
		require.NotContains(t, msg, "\n")
		require.Contains(t, msg, "tried libnvrtc.so.13 (not found), libnvrtc.so.12 (not found), /usr/local/cuda/lib64/libnvrtc.so.13 (")
		require.True(t, strings.HasSuffix(msg, "; install it or set MESHRUN_NVRTC_LIB to its file or folder"), msg)
		for _, p := range s.candidates(NVRTC) {
			require.Contains(t, msg, p+" (")
		}
	}
}
