//go:build cgo && linux

package cuda

/*
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// The entry points resolved by shim_cgo.go.
extern void *f_cuInit, *f_cuGetErrorName, *f_cuDeviceGetCount, *f_cuDeviceGet, *f_cuDeviceGetAttribute,
	*f_cuDeviceGetName, *f_cuDevicePrimaryCtxRetain, *f_cuCtxSetCurrent, *f_cuMemAlloc, *f_cuMemFree,
	*f_cuMemcpyHtoD, *f_cuMemcpyDtoH, *f_cuMemcpyDtoDAsync, *f_cuMemsetD8, *f_cuModuleLoadData,
	*f_cuModuleGetFunction, *f_cuModuleUnload, *f_cuLaunchKernel, *f_cuStreamCreate,
	*f_cuStreamSynchronize, *f_cuStreamDestroy, *f_cuDevicePrimaryCtxRelease, *f_cuDeviceTotalMem;
extern void *f_nvrtcCreateProgram, *f_nvrtcCompileProgram, *f_nvrtcGetCUBINSize, *f_nvrtcGetCUBIN,
	*f_nvrtcGetProgramLogSize, *f_nvrtcGetProgramLog, *f_nvrtcDestroyProgram, *f_nvrtcGetErrorString,
	*f_nvrtcGetPTXSize, *f_nvrtcGetPTX, *f_nvrtcGetNumSupportedArchs, *f_nvrtcGetSupportedArchs;
extern void *f_cublasCreate, *f_cublasDestroy, *f_cublasSetStream, *f_cublasSetMathMode,
	*f_cublasGemmEx, *f_cublasGemmStridedBatchedEx;

typedef unsigned long long devptr;
typedef int (*ctxset_t)(void *);

// Every call that touches a context makes it current on this OS thread
// first: goroutines move between threads, and the driver's current
// context is per thread. It costs a thread-local store.
#define CTX(c) do { int _rc = ((ctxset_t)f_cuCtxSetCurrent)((void *)(c)); if (_rc) return _rc; } while (0)

static const char *dr_errorName(int rc) {
	const char *s = NULL;
	if (((int (*)(int, const char **))f_cuGetErrorName)(rc, &s) != 0 || !s) return NULL;
	return s;
}

static int dr_init(int ordinal, int *dev, void **ctx, int *major, int *minor, char *name, int nameLen) {
	int rc;
	if ((rc = ((int (*)(unsigned))f_cuInit)(0))) return rc;
	if ((rc = ((int (*)(int *, int))f_cuDeviceGet)(dev, ordinal))) return rc;
	if ((rc = ((int (*)(int *, int, int))f_cuDeviceGetAttribute)(major, 75, *dev))) return rc; // COMPUTE_CAPABILITY_MAJOR
	if ((rc = ((int (*)(int *, int, int))f_cuDeviceGetAttribute)(minor, 76, *dev))) return rc; // COMPUTE_CAPABILITY_MINOR
	if ((rc = ((int (*)(char *, int, int))f_cuDeviceGetName)(name, nameLen, *dev))) return rc;
	return ((int (*)(void **, int))f_cuDevicePrimaryCtxRetain)(ctx, *dev);
}

static int dr_primaryCtxRelease(int dev) { return ((int (*)(int))f_cuDevicePrimaryCtxRelease)(dev); }

static int dr_totalMem(int ordinal, size_t *bytes) {
	int rc, dev;
	if ((rc = ((int (*)(unsigned))f_cuInit)(0))) return rc;
	if ((rc = ((int (*)(int *, int))f_cuDeviceGet)(&dev, ordinal))) return rc;
	return ((int (*)(size_t *, int))f_cuDeviceTotalMem)(bytes, dev);
}

static int dr_deviceCount(int *n) {
	int rc;
	if ((rc = ((int (*)(unsigned))f_cuInit)(0))) return rc;
	return ((int (*)(int *))f_cuDeviceGetCount)(n);
}

static int dr_streamCreate(uintptr_t ctx, void **s) { CTX(ctx); return ((int (*)(void **, unsigned))f_cuStreamCreate)(s, 0); }
static int dr_streamSync(uintptr_t ctx, uintptr_t s) { CTX(ctx); return ((int (*)(void *))f_cuStreamSynchronize)((void *)s); }
static int dr_streamDestroy(uintptr_t ctx, uintptr_t s) { CTX(ctx); return ((int (*)(void *))f_cuStreamDestroy)((void *)s); }

static int dr_alloc(uintptr_t ctx, devptr *p, size_t n) { CTX(ctx); return ((int (*)(devptr *, size_t))f_cuMemAlloc)(p, n); }
static int dr_free(uintptr_t ctx, devptr p) { CTX(ctx); return ((int (*)(devptr))f_cuMemFree)(p); }
static int dr_memset(uintptr_t ctx, devptr p, size_t n) { CTX(ctx); return ((int (*)(devptr, unsigned char, size_t))f_cuMemsetD8)(p, 0, n); }
static int dr_htod(uintptr_t ctx, devptr dst, const void *src, size_t n) {
	CTX(ctx);
	return ((int (*)(devptr, const void *, size_t))f_cuMemcpyHtoD)(dst, src, n);
}
static int dr_dtoh(uintptr_t ctx, void *dst, devptr src, size_t n) {
	CTX(ctx);
	return ((int (*)(void *, devptr, size_t))f_cuMemcpyDtoH)(dst, src, n);
}
static int dr_dtod(uintptr_t ctx, devptr dst, devptr src, size_t n, uintptr_t s) {
	CTX(ctx);
	return ((int (*)(devptr, devptr, size_t, void *))f_cuMemcpyDtoDAsync)(dst, src, n, (void *)s);
}

static int dr_moduleLoad(uintptr_t ctx, void **mod, const void *image) {
	CTX(ctx);
	return ((int (*)(void **, const void *))f_cuModuleLoadData)(mod, image);
}
static int dr_moduleUnload(uintptr_t ctx, uintptr_t mod) { CTX(ctx); return ((int (*)(void *))f_cuModuleUnload)((void *)mod); }
static int dr_getFunction(uintptr_t ctx, void **fn, uintptr_t mod, const char *name) {
	CTX(ctx);
	return ((int (*)(void **, void *, const char *))f_cuModuleGetFunction)(fn, (void *)mod, name);
}

// dr_launch launches a 1-D grid. params holds each argument's bytes at
// 8-byte aligned offsets (offs); the driver wants a pointer to each.
static int dr_launch(uintptr_t ctx, uintptr_t fn, unsigned grid, unsigned block, uintptr_t s, char *params, const int *offs, int nargs) {
	void *ptrs[16];
	if (nargs > 16) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) ptrs[i] = params + offs[i];
	CTX(ctx);
	typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
	return ((launch_t)f_cuLaunchKernel)((void *)fn, grid, 1, 1, block, 1, 1, 0, (void *)s, ptrs, NULL);
}

// NVRTC: one call compiles and, on failure, returns the log; ptx takes the
// program's PTX (a virtual architecture's) instead of its CUBIN.
static const char *nv_errorString(int rc) { return ((const char *(*)(int))f_nvrtcGetErrorString)(rc); }

static int nv_compile(const char *src, const char *name, int nopts, const char **opts, int ptx, char **image, size_t *size, char **log) {
	void *prog = NULL;
	int rc = ((int (*)(void **, const char *, const char *, int, const char *const *, const char *const *))f_nvrtcCreateProgram)(
		&prog, src, name, 0, NULL, NULL);
	if (rc) return rc;
	rc = ((int (*)(void *, int, const char *const *))f_nvrtcCompileProgram)(prog, nopts, opts);
	size_t logSize = 0;
	if (((int (*)(void *, size_t *))f_nvrtcGetProgramLogSize)(prog, &logSize) == 0 && logSize > 1) {
		*log = (char *)malloc(logSize);
		if (((int (*)(void *, char *))f_nvrtcGetProgramLog)(prog, *log) != 0) (*log)[0] = 0;
	}
	typedef int (*size_t_)(void *, size_t *);
	typedef int (*get_t)(void *, char *);
	if (rc == 0) rc = ((size_t_)(ptx ? f_nvrtcGetPTXSize : f_nvrtcGetCUBINSize))(prog, size);
	if (rc == 0) {
		*image = (char *)malloc(*size ? *size : 1);
		rc = ((get_t)(ptx ? f_nvrtcGetPTX : f_nvrtcGetCUBIN))(prog, *image);
	}
	((int (*)(void **))f_nvrtcDestroyProgram)(&prog);
	return rc;
}

static int nv_numArchs(int *n) { return ((int (*)(int *))f_nvrtcGetNumSupportedArchs)(n); }
static int nv_archs(int *a) { return ((int (*)(int *))f_nvrtcGetSupportedArchs)(a); }

// cuBLAS. Its calls run on the stream the handle is set to.
static int bl_create(uintptr_t ctx, void **h, uintptr_t s) {
	CTX(ctx);
	int rc = ((int (*)(void **))f_cublasCreate)(h);
	if (rc) return rc;
	return ((int (*)(void *, void *))f_cublasSetStream)(*h, (void *)s);
}
static int bl_destroy(uintptr_t ctx, uintptr_t h) { CTX(ctx); return ((int (*)(void *))f_cublasDestroy)((void *)h); }
static int bl_mathMode(uintptr_t ctx, uintptr_t h, int mode) { CTX(ctx); return ((int (*)(void *, int))f_cublasSetMathMode)((void *)h, mode); }

// bl_gemm is cublasGemmStridedBatchedEx, or cublasGemmEx for one batch,
// both untransposed (column-major; the Go side swaps the operands).
// alpha and beta are of the compute type's scale type (float or double).
static int bl_gemm(uintptr_t ctx, uintptr_t h, int m, int n, int k, const void *alpha, devptr a, int lda, long long sa,
	devptr b, int ldb, long long sb, const void *beta, devptr c, int ldc, long long sc, int batch,
	int dtype, int compute) {
	CTX(ctx);
	if (batch == 1) {
		typedef int (*gemm_t)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int,
			int, const void *, void *, int, int, int, int);
		return ((gemm_t)f_cublasGemmEx)((void *)h, 0, 0, m, n, k, alpha, (const void *)a, dtype, lda, (const void *)b, dtype, ldb,
			beta, (void *)c, dtype, ldc, compute, -1);
	}
	typedef int (*sgemm_t)(void *, int, int, int, int, int, const void *, const void *, int, int, long long,
		const void *, int, int, long long, const void *, void *, int, int, long long, int, int, int);
	return ((sgemm_t)f_cublasGemmStridedBatchedEx)((void *)h, 0, 0, m, n, k, alpha, (const void *)a, dtype, lda, sa,
		(const void *)b, dtype, ldb, sb, beta, (void *)c, dtype, ldc, sc, batch, compute, -1);
}
// ---- events (cuda/events.go): a rank's instructions timed on the stream ----
extern void *f_cuEventCreate, *f_cuEventRecord, *f_cuEventElapsedTime, *f_cuEventSynchronize, *f_cuEventDestroy;

// CU_EVENT_DEFAULT (0): timing on, and cuEventSynchronize spins, which
// wakes sooner than blocking sync (the mark's host time is read after it).
static int dr_eventCreate(uintptr_t ctx, void **e) { CTX(ctx); return ((int (*)(void **, unsigned))f_cuEventCreate)(e, 0); }
static int dr_eventDestroy(uintptr_t ctx, uintptr_t e) { CTX(ctx); return ((int (*)(void *))f_cuEventDestroy)((void *)e); }
static int dr_eventRecord(uintptr_t ctx, uintptr_t e, uintptr_t s) {
	CTX(ctx);
	return ((int (*)(void *, void *))f_cuEventRecord)((void *)e, (void *)s);
}
static int dr_eventSync(uintptr_t ctx, uintptr_t e) { CTX(ctx); return ((int (*)(void *))f_cuEventSynchronize)((void *)e); }

// dr_eventChain writes into ms[i] the milliseconds from evs[i] to
// evs[i+1], for i < n-1: one call into C per execution, not one per pair.
static int dr_eventChain(uintptr_t ctx, const uintptr_t *evs, int n, float *ms) {
	CTX(ctx);
	for (int i = 0; i + 1 < n; i++) {
		int rc = ((int (*)(float *, void *, void *))f_cuEventElapsedTime)(&ms[i], (void *)evs[i], (void *)evs[i + 1]);
		if (rc) return rc;
	}
	return 0;
}
*/
import "C"

import (
	"unsafe"
)

func errorName(rc int) string {
	if s := C.dr_errorName(C.int(rc)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func drInit(ordinal int) (dev int, ctx uintptr, major, minor int, name string, rc int) {
	var d, ma, mi C.int
	var c unsafe.Pointer
	var buf [256]C.char
	rc = int(C.dr_init(C.int(ordinal), &d, &c, &ma, &mi, &buf[0], C.int(len(buf))))
	return int(d), uintptr(c), int(ma), int(mi), C.GoString(&buf[0]), rc
}

func drPrimaryCtxRelease(dev int) int { return int(C.dr_primaryCtxRelease(C.int(dev))) }

func drTotalMem(ordinal int) (int64, int) {
	var n C.size_t
	rc := C.dr_totalMem(C.int(ordinal), &n)
	return int64(n), int(rc)
}

func drDeviceCount() (int, int) {
	var n C.int
	rc := C.dr_deviceCount(&n)
	return int(n), int(rc)
}

// ptr passes an opaque driver handle (never Go memory) to C.
func ptr(u uintptr) C.uintptr_t { return C.uintptr_t(u) }

func drStreamCreate(ctx uintptr) (uintptr, int) {
	var s unsafe.Pointer
	rc := C.dr_streamCreate(ptr(ctx), &s)
	return uintptr(s), int(rc)
}
func drStreamSync(ctx, s uintptr) int    { return int(C.dr_streamSync(ptr(ctx), ptr(s))) }
func drStreamDestroy(ctx, s uintptr) int { return int(C.dr_streamDestroy(ptr(ctx), ptr(s))) }

func drAlloc(ctx uintptr, n int64) (uint64, int) {
	var p C.devptr
	rc := C.dr_alloc(ptr(ctx), &p, C.size_t(n))
	return uint64(p), int(rc)
}
func drFree(ctx uintptr, p uint64) int { return int(C.dr_free(ptr(ctx), C.devptr(p))) }
func drMemset(ctx uintptr, p uint64, n int64) int {
	return int(C.dr_memset(ptr(ctx), C.devptr(p), C.size_t(n)))
}
func drHtoD(ctx uintptr, dst uint64, src unsafe.Pointer, n int64) int {
	return int(C.dr_htod(ptr(ctx), C.devptr(dst), src, C.size_t(n)))
}
func drDtoH(ctx uintptr, dst unsafe.Pointer, src uint64, n int64) int {
	return int(C.dr_dtoh(ptr(ctx), dst, C.devptr(src), C.size_t(n)))
}
func drDtoD(ctx uintptr, dst, src uint64, n int64, s uintptr) int {
	return int(C.dr_dtod(ptr(ctx), C.devptr(dst), C.devptr(src), C.size_t(n), ptr(s)))
}

func drModuleLoad(ctx uintptr, image []byte) (uintptr, int) {
	var m unsafe.Pointer
	img := C.CBytes(image) // the driver reads it during the call only
	defer C.free(img)
	rc := C.dr_moduleLoad(ptr(ctx), &m, img)
	return uintptr(m), int(rc)
}
func drModuleUnload(ctx, m uintptr) int { return int(C.dr_moduleUnload(ptr(ctx), ptr(m))) }
func drGetFunction(ctx, m uintptr, name string) (uintptr, int) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f unsafe.Pointer
	rc := C.dr_getFunction(ptr(ctx), &f, ptr(m), cs)
	return uintptr(f), int(rc)
}

// drLaunch launches fn with the packed arguments (see params).
func drLaunch(ctx, fn uintptr, grid, block int, s uintptr, p *params) int {
	buf := C.CBytes(p.buf)
	defer C.free(buf)
	offs := make([]C.int, len(p.offs))
	for i, o := range p.offs {
		offs[i] = C.int(o)
	}
	var op *C.int
	if len(offs) > 0 {
		op = &offs[0]
	}
	return int(C.dr_launch(ptr(ctx), ptr(fn), C.uint(grid), C.uint(block), ptr(s), (*C.char)(buf), op, C.int(len(offs))))
}

func nvErrorString(rc int) string { return C.GoString(C.nv_errorString(C.int(rc))) }

// nvSupportedArchs lists the real architectures NVRTC can compile for, as
// numbers (90 for sm_90).
func nvSupportedArchs() ([]int, int) {
	var n C.int
	if rc := C.nv_numArchs(&n); rc != 0 || n <= 0 {
		return nil, int(rc)
	}
	archs := make([]C.int, n)
	if rc := C.nv_archs(&archs[0]); rc != 0 {
		return nil, int(rc)
	}
	out := make([]int, n)
	for i, a := range archs {
		out[i] = int(a)
	}
	return out, 0
}

func nvCompile(src, name string, opts []string, ptx bool) (image []byte, log string, rc int) {
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	copts := make([]*C.char, len(opts)+1)
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	// The array holds C pointers only, so C may keep it during the call.
	arr := (**C.char)(C.malloc(C.size_t(len(copts)) * C.size_t(unsafe.Sizeof(copts[0]))))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(copts)), copts)
	var img, clog *C.char
	var size C.size_t
	cptx := C.int(0)
	if ptx {
		cptx = 1
	}
	rc = int(C.nv_compile(csrc, cname, C.int(len(opts)), arr, cptx, &img, &size, &clog))
	if clog != nil {
		log = C.GoString(clog)
		C.free(unsafe.Pointer(clog))
	}
	if img != nil {
		image = C.GoBytes(unsafe.Pointer(img), C.int(size))
		C.free(unsafe.Pointer(img))
	}
	return image, log, rc
}

func blCreate(ctx, s uintptr) (uintptr, int) {
	var h unsafe.Pointer
	rc := C.bl_create(ptr(ctx), &h, ptr(s))
	return uintptr(h), int(rc)
}
func blDestroy(ctx, h uintptr) int { return int(C.bl_destroy(ptr(ctx), ptr(h))) }
func blMathMode(ctx, h uintptr, mode int) int {
	return int(C.bl_mathMode(ptr(ctx), ptr(h), C.int(mode)))
}

func blGemm(ctx, h uintptr, g *gemmCall) int {
	var a32, b32 C.float
	var a64, b64 C.double
	alpha, beta := unsafe.Pointer(&a32), unsafe.Pointer(&b32)
	a32, a64 = 1, 1
	if g.double {
		alpha, beta = unsafe.Pointer(&a64), unsafe.Pointer(&b64)
	}
	return int(C.bl_gemm(ptr(ctx), ptr(h), C.int(g.m), C.int(g.n), C.int(g.k), alpha,
		C.devptr(g.a), C.int(g.lda), C.longlong(g.sa), C.devptr(g.b), C.int(g.ldb), C.longlong(g.sb), beta,
		C.devptr(g.c), C.int(g.ldc), C.longlong(g.sc), C.int(g.batch), C.int(g.dtype), C.int(g.compute)))
}

// ---- events (cuda/events.go) ----

func drEventCreate(ctx uintptr) (uintptr, int) {
	var e unsafe.Pointer
	rc := C.dr_eventCreate(ptr(ctx), &e)
	return uintptr(e), int(rc)
}
func drEventDestroy(ctx, e uintptr) int   { return int(C.dr_eventDestroy(ptr(ctx), ptr(e))) }
func drEventRecord(ctx, e, s uintptr) int { return int(C.dr_eventRecord(ptr(ctx), ptr(e), ptr(s))) }
func drEventSync(ctx, e uintptr) int      { return int(C.dr_eventSync(ptr(ctx), ptr(e))) }

// drEventChain returns the milliseconds between consecutive events of evs
// (len(evs)-1 of them).
func drEventChain(ctx uintptr, evs []uintptr) ([]float32, int) {
	if len(evs) < 2 {
		return nil, 0
	}
	// C memory: the handles and results pass through C without Go pointers
	n := len(evs)
	ce := (*C.uintptr_t)(C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.uintptr_t(0)))))
	defer C.free(unsafe.Pointer(ce))
	cm := (*C.float)(C.malloc(C.size_t(n-1) * C.size_t(unsafe.Sizeof(C.float(0)))))
	defer C.free(unsafe.Pointer(cm))
	handles := unsafe.Slice(ce, n)
	for i, e := range evs {
		handles[i] = C.uintptr_t(e)
	}
	if rc := C.dr_eventChain(ptr(ctx), ce, C.int(n), cm); rc != 0 {
		return nil, int(rc)
	}
	out := make([]float32, n-1)
	for i, v := range unsafe.Slice(cm, n-1) {
		out[i] = float32(v)
	}
	return out, 0
}
