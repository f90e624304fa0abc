package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The backend's tests run against one of two drivers:
//
//   - the fake (default): testdata/fake/fake.c, built here with cc into one
//     shared library that stands in for libcuda, NVRTC, cuBLAS and
//     cuBLASLt on host memory (see its header); every line of the backend
//     runs, only the GPU does not;
//   - the machine's real driver and libraries when MESHRUN_TEST_GPU=1 or
//     MESHRUN_REQUIRE_GPU=1 (bench/gpu.sh sets both): the same tests then
//     run on the GPU. Without a GPU they skip saying why, or, under
//     MESHRUN_REQUIRE_GPU=1, fail.

var (
	fakeOnce   sync.Once
	fakeSO     string
	fakeSkip   string // why the fake cannot be built here (no cc)
	fakeBroken error  // the fake did not build: a failure, not a skip
	fakeDir    string // holds the library and the shared kernel cache
)

// onGPU reports whether the tests run on the real driver.
func onGPU() bool {
	return os.Getenv("MESHRUN_TEST_GPU") == "1" || os.Getenv("MESHRUN_REQUIRE_GPU") == "1"
}

// buildFakeDriver compiles the fake once per test binary.
func buildFakeDriver(t testing.TB) string {
	t.Helper()
	if !haveDlopen {
		t.Skip("built without cgo: no dlopen, so no CUDA backend")
	}
	fakeOnce.Do(func() {
		cc, err := exec.LookPath("cc")
		if err == nil {
			_, err = exec.LookPath("c++") // the fake's NVRTC compiles the kernels as C++
		}
		if err != nil {
			fakeSkip = "no C and C++ compilers (cc, c++) to build the fake CUDA driver and its kernels"
			return
		}
		src, err := filepath.Abs(filepath.Join("testdata", "fake", "fake.c"))
		if err == nil {
			fakeDir, err = os.MkdirTemp("", "meshrun-fakecuda")
		}
		if err != nil {
			fakeBroken = err
			return
		}
		so := filepath.Join(fakeDir, "libfakecuda.so")
		if out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", so, src, "-ldl", "-lpthread").CombinedOutput(); err != nil {
			fakeBroken = fmt.Errorf("building the fake CUDA driver: %v\n%s", err, out)
			return
		}
		fakeSO = so
	})
	if fakeSkip != "" {
		t.Skip(fakeSkip)
	}
	require.NoError(t, fakeBroken)
	return fakeSO
}

// useDriver makes the package's libraries the fake (or, on a GPU, the
// real ones), whatever an earlier test loaded through the shim.
func useDriver(t testing.TB) {
	t.Helper()
	if onGPU() {
		for _, l := range []Lib{Driver, NVRTC, Cublas} {
			if err := Load(l); err != nil {
				if os.Getenv("MESHRUN_REQUIRE_GPU") == "1" {
					t.Fatalf("MESHRUN_REQUIRE_GPU=1: %v", err)
				}
				t.Skipf("no GPU stack here: %v", err)
			}
		}
		return
	}
	so := buildFakeDriver(t)
	emu, err := filepath.Abs(filepath.Join("testdata", "emu"))
	require.NoError(t, err)
	t.Setenv("MESHRUN_FAKE_EMU", emu)
	if os.Getenv("MESHRUN_CUDA_CACHE") == "" {
		t.Setenv("MESHRUN_CUDA_CACHE", filepath.Join(fakeDir, "cache"))
	}
	for _, l := range []Lib{Driver, NVRTC, CublasLt, Cublas} {
		t.Setenv(l.Env(), so)
		path, err := load(l, overrideOnly(l.Env(), so))
		require.NoError(t, err, "loading the fake as %s", l)
		loadMu.Lock()
		loaded[l].done, loaded[l].path, loaded[l].err = true, path, nil
		loadMu.Unlock()
	}
}

// newTestBackend opens device 0 of the driver in use; notices go to the
// test log.
func newTestBackend(t testing.TB) *Backend {
	t.Helper()
	useDriver(t)
	be, err := NewBackend(0, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, be.Close()) })
	return be
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeDir != "" {
		os.RemoveAll(fakeDir)
	}
	os.Exit(code)
}
