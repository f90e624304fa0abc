package cuda

import (
	"crypto/sha256"
	_ "embed" // the kernel source
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// MemorySource is the CUDA C of the data-movement kernels (box copies for
// Slice and Embed, fills); it uses elementwise.cu's definitions, so the
// two are compiled as one program (KernelSource).
//
//go:embed memory.cu
var MemorySource string

// OptimSource is the CUDA C of Adam's fused ops (optim.cu), also compiled
// after elementwise.cu.
//
//go:embed optim.cu
var OptimSource string

// ReduceSource is the CUDA C of the reductions and the MSE loss
// (reduce.cu), also compiled after elementwise.cu.
//
//go:embed reduce.cu
var ReduceSource string

// NNSource is the CUDA C of softmax, log_softmax and layernorm (nn.cu),
// compiled after reduce.cu (it uses mr_mathmax).
//
//go:embed nn.cu
var NNSource string

// GatherSource is the CUDA C of embedding and cross_entropy and their
// gradients (gather.cu), compiled after nn.cu.
//
//go:embed gather.cu
var GatherSource string

// KernelSource is the one program NVRTC compiles for a device.
func KernelSource() string {
	return strings.Join([]string{ElementwiseSource, MemorySource, OptimSource, ReduceSource, NNSource, GatherSource}, "\n")
}

// module is a loaded program and the functions looked up in it so far.
type module struct {
	handle uintptr
	mu     sync.Mutex
	fns    map[string]uintptr
}

func (m *module) function(d *Device, name string) (uintptr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.fns[name]; ok {
		return f, nil
	}
	f, rc := drGetFunction(d.ctx, m.handle, name)
	if err := check("cuModuleGetFunction", name, rc); err != nil {
		return 0, err
	}
	m.fns[name] = f
	return f, nil
}

const nvrtcInvalidOption = 5 // NVRTC_ERROR_INVALID_OPTION

// compileOptions are NVRTC's options for arch: no fast math, and no
// contraction of a·b + c into a fused multiply-add (--fmad=false), which
// Go's compiler does not do on amd64 either: so the kernels round as the
// CPU backend does, operation by operation (within the stated ulps where
// math functions are involved).
var compileOptions = func(arch string) []string {
	return []string{"--gpu-architecture=" + arch, "--std=c++17", "--fmad=false"}
}

// CacheDir is where compiled kernels are kept: $MESHRUN_CUDA_CACHE, else
// meshrun/cuda under the user's cache folder (~/.cache).
func CacheDir() string {
	if d := os.Getenv("MESHRUN_CUDA_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "meshrun", "cuda")
	}
	return filepath.Join(os.TempDir(), "meshrun-cuda-cache")
}

// cacheKey names a compiled image: the source, the architecture, the
// options and NVRTC's version all change what NVRTC produces.
func cacheKey(src, arch string, opts []string) string {
	major, minor, _ := NVRTCVersion()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d.%d\x00", arch, strings.Join(opts, " "), major, minor)
	h.Write([]byte(src))
	return hex.EncodeToString(h.Sum(nil))[:32] + "-" + arch + ".cubin"
}

// compile returns the CUBIN of src for arch, from the disk cache when it
// is there; a new one is written to the cache (best effort: a cache that
// cannot be written costs a compile next time, nothing else).
func compile(src, arch string) ([]byte, error) {
	opts := compileOptions(arch)
	path := filepath.Join(CacheDir(), cacheKey(src, arch, opts))
	if image, err := os.ReadFile(path); err == nil && len(image) > 0 {
		return image, nil
	}
	image, log, rc := nvCompile(src, "meshrun_kernels.cu", opts)
	if rc != 0 {
		msg := fmt.Sprintf("cuda: nvrtcCompileProgram for %s: %s (%d)", arch, nvErrorString(rc), rc)
		if rc == nvrtcInvalidOption {
			major, minor, _ := NVRTCVersion()
			msg += fmt.Sprintf("; NVRTC %d.%d (%s) may not know %s: use a newer one (CUDA 13's; %s names its file)",
				major, minor, Path(NVRTC), arch, NVRTC.Env())
		}
		if log = strings.TrimSpace(log); log != "" {
			msg += ":\n" + log
		}
		return nil, fmt.Errorf("%s", msg)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		if os.WriteFile(tmp, image, 0o644) == nil {
			os.Rename(tmp, path)
		}
	}
	return image, nil
}

func (d *Device) loadModule(src string) (*module, error) {
	image, err := compile(src, d.Arch)
	if err != nil {
		return nil, err
	}
	h, rc := drModuleLoad(d.ctx, image)
	if err := check("cuModuleLoadData", d.Arch+" kernels", rc); err != nil {
		return nil, err
	}
	return &module{handle: h, fns: map[string]uintptr{}}, nil
}
