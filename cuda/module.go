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
	return strings.Join([]string{ElementwiseSource, MemorySource, OptimSource, ReduceSource, NNSource, GatherSource, CommSource}, "\n")
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

// cacheKey names a compiled image: the source, the target (sm_XY for a
// CUBIN, compute_XY for PTX), the options and NVRTC's version all change
// what NVRTC produces.
func cacheKey(src, target string, opts []string) string {
	major, minor, _ := NVRTCVersion()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d.%d\x00", target, strings.Join(opts, " "), major, minor)
	h.Write([]byte(src))
	ext := ".cubin"
	if strings.HasPrefix(target, "compute_") {
		ext = ".ptx"
	}
	return hex.EncodeToString(h.Sum(nil))[:32] + "-" + target + ext
}

// compile returns the kernels of src for the GPU architecture arch (sm_XY)
// as the driver loads them, and what they are. Normally that is a CUBIN
// for arch. When NVRTC does not know arch (a GPU newer than the NVRTC:
// an old CUDA's pip wheels on a new card), it is PTX for the newest
// architecture NVRTC knows below arch, which the driver JIT-compiles for
// the GPU as it loads it: forward compatibility, as PyTorch's own PTX
// gives it (the first load is slower; the driver caches the result).
func compile(src, arch string) (image []byte, code string, err error) {
	image, rc, err := compileFor(src, arch)
	if err == nil {
		return image, arch + " CUBIN", nil
	}
	virt := newestKnownBelow(arch)
	if rc != nvrtcInvalidOption || virt == 0 {
		return nil, "", err
	}
	target := fmt.Sprintf("compute_%d", virt)
	if image, _, err = compileFor(src, target); err != nil {
		return nil, "", err
	}
	return image, fmt.Sprintf("PTX for %s, JIT-compiled by the driver for %s", target, arch), nil
}

// newestKnownBelow is the newest architecture NVRTC knows that is older
// than arch (sm_XY), as a number (90); 0 when there is none.
func newestKnownBelow(arch string) int {
	var want int
	if _, err := fmt.Sscanf(arch, "sm_%d", &want); err != nil {
		return 0
	}
	archs, rc := nvSupportedArchs()
	best := 0
	for _, a := range archs {
		if rc == 0 && a < want && a > best {
			best = a
		}
	}
	return best
}

// compileFor compiles src for target, sm_XY (a CUBIN) or compute_XY (PTX,
// ending in the NUL the driver needs), from the disk cache when it is
// there; a new image is written to the cache (best effort: a cache that
// cannot be written costs a compile next time, nothing else). rc is
// NVRTC's status when it failed.
func compileFor(src, target string) ([]byte, int, error) {
	opts := compileOptions(target)
	path := filepath.Join(CacheDir(), cacheKey(src, target, opts))
	if image, err := os.ReadFile(path); err == nil && len(image) > 0 {
		return image, 0, nil
	}
	image, log, rc := nvCompile(src, "meshrun_kernels.cu", opts, strings.HasPrefix(target, "compute_"))
	if rc != 0 {
		msg := fmt.Sprintf("cuda: nvrtcCompileProgram for %s: %s (%d)", target, nvErrorString(rc), rc)
		if rc == nvrtcInvalidOption {
			major, minor, _ := NVRTCVersion()
			msg += fmt.Sprintf("; NVRTC %d.%d (%s) may not know %s: use a newer one (CUDA 13's; %s names its file)",
				major, minor, Path(NVRTC), target, NVRTC.Env())
		}
		if log = strings.TrimSpace(log); log != "" {
			msg += ":\n" + log
		}
		return nil, rc, fmt.Errorf("%s", msg)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		if os.WriteFile(tmp, image, 0o644) == nil {
			os.Rename(tmp, path)
		}
	}
	return image, 0, nil
}

// loadModule compiles src for the device and loads it; d.Code says what
// the kernels are (a CUBIN, or PTX the driver JIT-compiled).
func (d *Device) loadModule(src string) (*module, error) {
	image, code, err := compile(src, d.Arch)
	if err != nil {
		return nil, err
	}
	h, rc := drModuleLoad(d.ctx, image)
	if err := check("cuModuleLoadData", d.Arch+" kernels ("+code+")", rc); err != nil {
		return nil, err
	}
	d.Code = code
	return &module{handle: h, fns: map[string]uintptr{}}, nil
}
