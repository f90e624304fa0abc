//go:build cgo && linux

package rt

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*, int);
typedef void (*threads_fn)(int);
typedef int (*get_threads_fn)(void);
typedef char *(*config_fn)(void);

static void *ob_handle;
static sgemm_fn ob_sgemm;
static dgemm_fn ob_dgemm;
static threads_fn ob_set_threads;
static get_threads_fn ob_get_threads;
static config_fn ob_config;
static config_fn ob_corename;

static int ob_load(const char *name) {
	ob_handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!ob_handle) return 1;
	ob_sgemm = (sgemm_fn)dlsym(ob_handle, "cblas_sgemm");
	ob_dgemm = (dgemm_fn)dlsym(ob_handle, "cblas_dgemm");
	if (!ob_sgemm || !ob_dgemm) return 2;
	// OpenBLAS's own extensions; absent from a reference libblas renamed.
	ob_set_threads = (threads_fn)dlsym(ob_handle, "openblas_set_num_threads");
	ob_get_threads = (get_threads_fn)dlsym(ob_handle, "openblas_get_num_threads");
	ob_config = (config_fn)dlsym(ob_handle, "openblas_get_config");
	ob_corename = (config_fn)dlsym(ob_handle, "openblas_get_corename");
	return 0;
}

static void ob_threads(int n) { if (ob_set_threads) ob_set_threads(n); }
static int ob_nthreads(void) { return ob_get_threads ? ob_get_threads() : 0; }
static const char *ob_cfg(void) { return ob_config ? ob_config() : ""; }
static const char *ob_core(void) { return ob_corename ? ob_corename() : "?"; }

// CblasRowMajor = 101, CblasNoTrans = 111.
static void ob_s(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
	ob_sgemm(101, 111, 111, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
static void ob_d(int m, int n, int k, const double *a, int lda, const double *b, int ldb, double *c, int ldc) {
	ob_dgemm(101, 111, 111, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}
// The same with either operand read transposed (CblasTrans = 112).
static void ob_st(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
	ob_sgemm(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
static void ob_dt(int ta, int tb, int m, int n, int k, const double *a, int lda, const double *b, int ldb, double *c, int ldc) {
	ob_dgemm(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"unsafe"
)

// OpenBLAS calls cblas_sgemm/cblas_dgemm from libopenblas.so.0, opened with
// dlopen at run time: nothing about it is needed to build.
type OpenBLAS struct{}

var (
	obOnce sync.Once
	obErr  error
)

// LoadOpenBLAS opens libopenblas.so.0. MESHRUN_BLAS=gonum (or asm)
// declines it.
// It sets OpenBLAS's thread count once, to MESHRUN_BLAS_THREADS when set,
// else to GOMAXPROCS: left alone, OpenBLAS starts a thread per core
// whatever GOMAXPROCS says, and its idle threads spin in sched_yield next
// to the Go scheduler's own workers (issue 10).
func LoadOpenBLAS() (BLAS, error) {
	if v := os.Getenv("MESHRUN_BLAS"); v != "" && v != "openblas" {
		return nil, fmt.Errorf("OpenBLAS declined: MESHRUN_BLAS=%s", v)
	}
	obOnce.Do(func() {
		chooseCoreType()
		name := C.CString("libopenblas.so.0")
		defer C.free(unsafe.Pointer(name))
		switch C.ob_load(name) {
		case 1:
			obErr = errNoOpenBLAS
		case 2:
			obErr = fmt.Errorf("libopenblas.so.0 has no cblas_sgemm/cblas_dgemm")
		default:
			obErr = setOpenBLASThreads()
		}
	})
	if obErr != nil {
		return nil, obErr
	}
	return OpenBLAS{}, nil
}

func (OpenBLAS) Name() string { return "openblas" }

// obThreads is the process's BLAS threads: MESHRUN_BLAS_THREADS, else
// GOMAXPROCS (setOpenBLASThreads).
var obThreads int

// setOpenBLASThreads applies MESHRUN_BLAS_THREADS (or GOMAXPROCS).
func setOpenBLASThreads() error {
	n := runtime.GOMAXPROCS(0)
	if v := os.Getenv("MESHRUN_BLAS_THREADS"); v != "" {
		t, err := strconv.Atoi(v)
		if err != nil || t < 1 {
			return fmt.Errorf("MESHRUN_BLAS_THREADS=%q: want a number of threads >= 1", v)
		}
		n = t
	}
	obThreads = n
	C.ob_threads(C.int(n))
	return nil
}

// shareBLASThreads splits the process's BLAS threads evenly among ranks
// that run at once in it (the local launcher's), at least one each: every
// rank calls GEMM on its own, and OpenBLAS's thread count is per call, so
// two ranks each calling with all of them oversubscribe the cores with
// threads that then wait on each other. bench/torch_mlp.sh's MLP on
// [dp=2] with 2 threads: 35–39 ms per step with 2 BLAS threads per call,
// 20–25 ms with 1 (one device: 15–19 ms either way). With one rank it
// restores them all. Nothing happens where OpenBLAS is declined or absent.
func shareBLASThreads(ranks int) {
	if _, err := LoadOpenBLAS(); err != nil {
		return
	}
	C.ob_threads(C.int(max(1, obThreads/max(1, ranks))))
}

// Describe names the library, its build (openblas_get_config), the kernels
// it chose for this CPU (openblas_get_corename: a DYNAMIC_ARCH build picks
// them at load time) and the threads it runs GEMM on.
func (OpenBLAS) Describe() string {
	return fmt.Sprintf("OpenBLAS (libopenblas.so.0: %s; %s kernels), %d thread(s)", C.GoString(C.ob_cfg()), C.GoString(C.ob_core()), int(C.ob_nthreads()))
}

// obSlots bounds the calls into OpenBLAS at once. Each OS thread that
// calls it takes one of its per-thread buffers (tens of MB), and a library
// built for 128 threads aborts the process past its table ("too many
// memory regions"): 256 virtual devices, each a goroutine blocked in its
// own cgo call on its own thread, reach that. No more calls than Go runs
// threads at once can make progress anyway, and Go reuses the threads it
// has, so few distinct threads ever enter the library (about twice the
// slots at most: those inside it and those running Go code that may enter
// it next), hence the cap of 32 slots on machines with many CPUs.
var obSlots = newSlots(min(max(2, runtime.GOMAXPROCS(0)), 32))

func (OpenBLAS) Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:(m-1)*ldc+n])
		return
	}
	pa, pb, pc := (*C.float)(&a[0]), (*C.float)(&b[0]), (*C.float)(&c[0]) // any panic before a slot is taken
	obSlots.acquire()
	C.ob_s(C.int(m), C.int(n), C.int(k), pa, C.int(lda), pb, C.int(ldb), pc, C.int(ldc))
	obSlots.release()
}

func (OpenBLAS) Dgemm(m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:(m-1)*ldc+n])
		return
	}
	pa, pb, pc := (*C.double)(&a[0]), (*C.double)(&b[0]), (*C.double)(&c[0])
	obSlots.acquire()
	C.ob_d(C.int(m), C.int(n), C.int(k), pa, C.int(lda), pb, C.int(ldb), pc, C.int(ldc))
	obSlots.release()
}

// SgemmT is Sgemm with A (m×k) stored as its k×m transpose when ta and B
// (k×n) as its n×k transpose when tb: OpenBLAS's packing reads either
// layout, so a transposed operand costs no copy (TransBLAS).
func (OpenBLAS) SgemmT(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:(m-1)*ldc+n])
		return
	}
	pa, pb, pc := (*C.float)(&a[0]), (*C.float)(&b[0]), (*C.float)(&c[0])
	obSlots.acquire()
	C.ob_st(cBool(ta), cBool(tb), C.int(m), C.int(n), C.int(k), pa, C.int(lda), pb, C.int(ldb), pc, C.int(ldc))
	obSlots.release()
}

// DgemmT is SgemmT in float64.
func (OpenBLAS) DgemmT(ta, tb bool, m, n, k int, a []float64, lda int, b []float64, ldb int, c []float64, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:(m-1)*ldc+n])
		return
	}
	pa, pb, pc := (*C.double)(&a[0]), (*C.double)(&b[0]), (*C.double)(&c[0])
	obSlots.acquire()
	C.ob_dt(cBool(ta), cBool(tb), C.int(m), C.int(n), C.int(k), pa, C.int(lda), pb, C.int(ldb), pc, C.int(ldc))
	obSlots.release()
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// chooseCoreType sets OPENBLAS_CORETYPE, unless the user did, from the
// CPU's flags, before OpenBLAS reads it at load time. A DYNAMIC_ARCH
// OpenBLAS that does not know the CPU model falls back to its Prescott
// (SSE3) kernels: Debian 12's 0.3.21 does so on Sapphire Rapids, and its
// SGEMM runs at 18–20 GF/s there instead of 125–150 GF/s with the SkylakeX
// (AVX-512) kernels, one thread. The kernels named here are those
// OpenBLAS picks for the Intel CPUs it knows with these flags (for AMD
// CPUs its own choices reuse the Haswell or SkylakeX kernels).
func chooseCoreType() {
	if os.Getenv("OPENBLAS_CORETYPE") != "" {
		return
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return
	}
	if t := coreTypeFor(cpuFlags(string(b))); t != "" {
		os.Setenv("OPENBLAS_CORETYPE", t)
	}
}
