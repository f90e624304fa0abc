package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeMachine is a searcher over a made-up environment and file tree.
func fakeMachine(env map[string]string, globs map[string][]string, dirs ...string) searcher {
	return searcher{
		getenv: func(k string) string { return env[k] },
		glob:   func(p string) []string { return globs[p] },
		isDir: func(p string) bool {
			for _, d := range dirs {
				if d == p {
					return true
				}
			}
			return false
		},
	}
}

func TestSearchOrderToolkitLibrary(t *testing.T) {
	s := fakeMachine(map[string]string{"HOME": "/home/u", "VIRTUAL_ENV": "/venv", "CUDA_HOME": "/opt/ct"},
		map[string][]string{
			"/usr/local/cuda-*/lib64":                   {"/usr/local/cuda-12.8/lib64", "/usr/local/cuda-13.0/lib64"},
			"/venv/lib/python3*/site-packages":          {"/venv/lib/python3.12/site-packages"},
			"/usr/lib/python3*/dist-packages":           {"/usr/lib/python3/dist-packages"},
			"/home/u/.local/lib/python3*/site-packages": nil,
		})
	got := s.candidates(NVRTC)
	want := []string{
		// the dynamic loader: LD_LIBRARY_PATH, ld.so.cache
		"libnvrtc.so.13", "libnvrtc.so.12",
		"/opt/ct/lib64/libnvrtc.so.13", "/opt/ct/lib64/libnvrtc.so.12",
		"/opt/ct/lib/libnvrtc.so.13", "/opt/ct/lib/libnvrtc.so.12",
		"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12",
		// newest versioned toolkit first
		"/usr/local/cuda-13.0/lib64/libnvrtc.so.13", "/usr/local/cuda-13.0/lib64/libnvrtc.so.12",
		"/usr/local/cuda-12.8/lib64/libnvrtc.so.13", "/usr/local/cuda-12.8/lib64/libnvrtc.so.12",
		"/opt/cuda/lib64/libnvrtc.so.13", "/opt/cuda/lib64/libnvrtc.so.12",
		// pip wheels: the virtualenv before the system's
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnvrtc.so.12",
		"/venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.13",
		"/venv/lib/python3.12/site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
		"/usr/lib/python3/dist-packages/nvidia/cu13/lib/libnvrtc.so.13",
		"/usr/lib/python3/dist-packages/nvidia/cu13/lib/libnvrtc.so.12",
		"/usr/lib/python3/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.13",
		"/usr/lib/python3/dist-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
	}
	require.Equal(t, want, got)

	// NCCL's wheel keeps its own folder in CUDA 13 too, so it comes first.
	nccl := s.candidates(NCCL)
	require.Equal(t, "libnccl.so.2", nccl[0])
	require.Equal(t, []string{
		"/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
		"/venv/lib/python3.12/site-packages/nvidia/cu13/lib/libnccl.so.2",
		"/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2",
		"/usr/lib/python3/dist-packages/nvidia/cu13/lib/libnccl.so.2",
	}, nccl[len(nccl)-4:])
}

func TestSearchOrderDriver(t *testing.T) {
	// The driver is not part of the toolkit: CUDA_HOME and pip are not
	// searched for it.
	s := fakeMachine(map[string]string{"CUDA_HOME": "/opt/ct", "VIRTUAL_ENV": "/venv"}, nil)
	require.Equal(t, []string{
		"libcuda.so.1",
		"/usr/local/nvidia/lib64/libcuda.so.1",
		"/usr/lib/wsl/lib/libcuda.so.1",
		"/usr/lib/" + multiarch() + "/libcuda.so.1",
		"/usr/lib64/libcuda.so.1",
		"/usr/lib/libcuda.so.1",
	}, s.candidates(Driver))
}

func TestSearchOverride(t *testing.T) {
	file := fakeMachine(map[string]string{"MESHRUN_CUBLAS_LIB": "/x/libcublas.so.13.1", "CUDA_HOME": "/opt/ct"}, nil)
	require.Equal(t, []string{"/x/libcublas.so.13.1"}, file.candidates(Cublas))
	dir := fakeMachine(map[string]string{"MESHRUN_NCCL_LIB": "/nccl/lib"}, nil, "/nccl/lib")
	require.Equal(t, []string{"/nccl/lib/libnccl.so.2"}, dir.candidates(NCCL))
	// Each library has its own variable.
	require.Equal(t, "MESHRUN_CUDA_LIB", Driver.Env())
	require.Equal(t, "MESHRUN_NVRTC_LIB", NVRTC.Env())
	require.Equal(t, "MESHRUN_CUBLASLT_LIB", CublasLt.Env())
	require.Equal(t, []string{"libcublasLt.so.13", "libcublasLt.so.12"}, file.candidates(CublasLt)[:2])
}

func TestMissingLibraryIsOneLine(t *testing.T) {
	if !haveDlopen {
		_, err := load(NVRTC, systemSearcher())
		require.ErrorIs(t, err, ErrNoCgo)
		return
	}
	empty := t.TempDir()
	s := systemSearcher()
	s.getenv = func(k string) string {
		if k == "MESHRUN_NVRTC_LIB" {
			return empty
		}
		return ""
	}
	_, err := load(NVRTC, s)
	require.Error(t, err)
	msg := err.Error()
	require.NotContains(t, msg, "\n")
	require.Equal(t, "cuda: cannot load NVRTC: tried "+
		filepath.Join(empty, "libnvrtc.so.13")+" (not found), "+
		filepath.Join(empty, "libnvrtc.so.12")+" (not found); MESHRUN_NVRTC_LIB is set, so nothing else was tried", msg)

	// A file that is not a shared library says what dlopen said.
	bogus := filepath.Join(empty, "libnccl.so.2")
	require.NoError(t, os.WriteFile(bogus, []byte("not an ELF file"), 0o644))
	s.getenv = func(k string) string {
		if k == "MESHRUN_NCCL_LIB" {
			return bogus
		}
		return ""
	}
	_, err = load(NCCL, s)
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "cuda: cannot load NCCL: tried "+bogus+" ("), err.Error())
	require.NotContains(t, err.Error(), "not found")
}
