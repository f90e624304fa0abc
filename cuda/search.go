package cuda

import (
	"os"
	"path/filepath"
	"runtime"
	"sort"
)

// Lib names one of the libraries the backend loads.
type Lib int

const (
	Driver   Lib = iota // libcuda, the driver API
	NVRTC               // run-time compilation of CUDA C
	CublasLt            // cuBLASLt (before cuBLAS: cuBLAS needs it)
	Cublas              // cuBLAS
	NCCL                // collectives between GPUs and hosts
	numLibs
)

type libInfo struct {
	name    string   // for messages
	env     string   // overriding environment variable
	sonames []string // newest first
	pip     []string // folders under site-packages of NVIDIA's wheels
	driver  bool     // installed by the driver, not the toolkit
}

var libs = [numLibs]libInfo{
	Driver: {name: "libcuda (CUDA driver)", env: "MESHRUN_CUDA_LIB", sonames: []string{"libcuda.so.1"}, driver: true},
	NVRTC: {name: "NVRTC", env: "MESHRUN_NVRTC_LIB", sonames: []string{"libnvrtc.so.13", "libnvrtc.so.12"},
		pip: []string{"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"}},
	CublasLt: {name: "cuBLASLt", env: "MESHRUN_CUBLASLT_LIB", sonames: []string{"libcublasLt.so.13", "libcublasLt.so.12"},
		pip: []string{"nvidia/cu13/lib", "nvidia/cublas/lib"}},
	Cublas: {name: "cuBLAS", env: "MESHRUN_CUBLAS_LIB", sonames: []string{"libcublas.so.13", "libcublas.so.12"},
		pip: []string{"nvidia/cu13/lib", "nvidia/cublas/lib"}},
	NCCL: {name: "NCCL", env: "MESHRUN_NCCL_LIB", sonames: []string{"libnccl.so.2"},
		pip: []string{"nvidia/nccl/lib", "nvidia/cu13/lib"}},
}

func (l Lib) String() string { return libs[l].name }

// Env is the environment variable that overrides l's search.
func (l Lib) Env() string { return libs[l].env }

// searcher holds what the search reads from the machine, so tests can
// give it a made-up environment and file tree.
type searcher struct {
	getenv func(string) string
	glob   func(string) []string // sorted matches of a pattern
	isDir  func(string) bool
}

func systemSearcher() searcher {
	return searcher{
		getenv: os.Getenv,
		glob: func(p string) []string {
			m, _ := filepath.Glob(p)
			return m
		},
		isDir: func(p string) bool {
			st, err := os.Stat(p)
			return err == nil && st.IsDir()
		},
	}
}

// candidates lists the paths to hand to dlopen for l, in order (see the
// package comment). A bare soname lets the dynamic loader search.
func (s searcher) candidates(l Lib) []string {
	info := libs[l]
	if p := s.getenv(info.env); p != "" {
		if s.isDir(p) {
			return inDirs([]string{p}, info.sonames)
		}
		return []string{p}
	}
	out := append([]string(nil), info.sonames...)
	out = append(out, inDirs(s.installDirs(info), info.sonames)...)
	return dedupe(out)
}

// installDirs are the folders of steps 3 and 4 for one library.
func (s searcher) installDirs(info libInfo) []string {
	var dirs []string
	if info.driver {
		arch := multiarch()
		dirs = append(dirs, "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib", "/usr/lib/"+arch, "/usr/lib64", "/usr/lib")
		return dirs
	}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if p := s.getenv(v); p != "" {
			dirs = append(dirs, filepath.Join(p, "lib64"), filepath.Join(p, "lib"))
		}
	}
	dirs = append(dirs, "/usr/local/cuda/lib64")
	versioned := s.glob("/usr/local/cuda-*/lib64")
	sort.Sort(sort.Reverse(sort.StringSlice(versioned))) // newest toolkit first
	dirs = append(dirs, versioned...)
	dirs = append(dirs, "/opt/cuda/lib64")
	for _, site := range s.sitePackages() {
		for _, sub := range info.pip {
			dirs = append(dirs, filepath.Join(site, sub))
		}
	}
	return dirs
}

// sitePackages lists the Python package folders that exist, without
// running Python (python3* also matches Debian's python3/dist-packages).
func (s searcher) sitePackages() []string {
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := s.getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	if h := s.getenv("HOME"); h != "" {
		prefixes = append(prefixes, filepath.Join(h, ".local"))
	}
	prefixes = append(prefixes, "/usr/local", "/usr", "/opt/conda")
	var out []string
	for _, p := range prefixes {
		for _, kind := range []string{"site-packages", "dist-packages"} {
			out = append(out, s.glob(filepath.Join(p, "lib", "python3*", kind))...)
		}
	}
	return dedupe(out)
}

func inDirs(dirs, sonames []string) []string {
	var out []string
	for _, d := range dirs {
		for _, so := range sonames {
			out = append(out, filepath.Join(d, so))
		}
	}
	return out
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	out := xs[:0:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// multiarch is Debian's library folder name for this architecture.
func multiarch() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}
