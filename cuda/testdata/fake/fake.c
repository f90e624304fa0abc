/* fake.c: a stand-in for libcuda, NVRTC, cuBLAS and cuBLASLt on a machine
 * without a GPU, for the CUDA backend's tests. One shared library exports
 * every entry point the backend's loader resolves; the tests point
 * MESHRUN_CUDA_LIB, MESHRUN_NVRTC_LIB, MESHRUN_CUBLAS_LIB and
 * MESHRUN_CUBLASLT_LIB at it.
 *
 * - Device memory is host memory (malloc). Every allocation is recorded,
 *   and every copy, memset and GEMM operand must lie inside a live one:
 *   an out-of-bounds or freed pointer is CUDA_ERROR_INVALID_VALUE.
 * - A context must be current on the calling thread for every call that
 *   needs one (CUDA_ERROR_INVALID_CONTEXT otherwise), as on a GPU.
 * - NVRTC "compiles" by building the source, under testdata/emu/emu.h with
 *   MR_EMU_ENTRIES, into a shared library with the C++ compiler (c++, as
 *   NVRTC compiles C++; contracting a·b + c into FMAs unless the options
 *   say --fmad=false, as NVRTC does); that file's
 *   bytes are the "CUBIN". cuModuleLoadData writes them to a file and
 *   dlopens it; cuLaunchKernel calls the kernel's NAME__emu entry, which
 *   runs the grid one thread at a time from the driver's argument list.
 *   Launches are serialised (one stream, and emu.h's grid globals).
 * - cuBLAS's GEMMs are column-major loops in the compute type, with
 *   cuBLAS's argument checks (leading dimensions, types): f32 and f64,
 *   bf16/f16 operands with f32 compute (widened, rounded once), and f32
 *   with CUBLAS_COMPUTE_32F_FAST_TF32 (operands rounded to TF32).
 *
 * Environment: MESHRUN_FAKE_EMU is the folder holding emu.h (required by
 * NVRTC); MESHRUN_FAKE_FAIL lists entry points that fail (with their
 * usual error: cuMemAlloc_v2 out of memory, cuMemsetD8_v2 an invalid
 * value, nvrtcCompileProgram a compilation error, cublasGemmEx execution
 * failed; cuStreamCreate, cublasCreate_v2 and cuEventRecord fail too); MESHRUN_FAKE_LOG
 * names a file each compilation appends a line to; MESHRUN_FAKE_LIFECYCLE
 * names one that every retain and release of the primary context, and
 * every creation and destruction of a stream, cuBLAS handle and event,
 * append a "+ctx" or "-ctx" (stream, blas, event) line to, so a test can see
 * that what is made is also given back; MESHRUN_FAKE_MAX_SM
 * (e.g. 80) makes NVRTC reject newer architectures, as an old one does;
 * MESHRUN_FAKE_GPUS is how many devices there are (1). It is also a fake
 * libnccl for ranks in several processes (the last block). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef unsigned long long devptr;

static int failing(const char *name) {
	const char *f = getenv("MESHRUN_FAKE_FAIL");
	if (!f) return 0;
	size_t n = strlen(name);
	for (const char *p = strstr(f, name); p; p = strstr(p + 1, name))
		if ((p == f || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
	return 0;
}

/* ---- errors ---- */
static const struct { int code; const char *name; } errs[] = {
	{0, "CUDA_SUCCESS"}, {1, "CUDA_ERROR_INVALID_VALUE"}, {2, "CUDA_ERROR_OUT_OF_MEMORY"},
	{101, "CUDA_ERROR_INVALID_DEVICE"}, {200, "CUDA_ERROR_INVALID_IMAGE"}, {201, "CUDA_ERROR_INVALID_CONTEXT"},
	{209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
	{400, "CUDA_ERROR_INVALID_HANDLE"}, {500, "CUDA_ERROR_NOT_FOUND"}, {801, "CUDA_ERROR_NOT_SUPPORTED"},
};
int cuGetErrorName(int rc, const char **s) {
	for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
		if (errs[i].code == rc) { *s = errs[i].name; return 0; }
	*s = NULL;
	return 1;
}
int cuGetErrorString(int rc, const char **s) { return cuGetErrorName(rc, s); }

/* ---- device and context ---- */
static int the_ctx;
static __thread void *current;
#define NEED_CTX do { if (current != &the_ctx) return 201; } while (0)

int cuInit(unsigned flags) { return flags ? 1 : 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
/* MESHRUN_FAKE_GPUS devices (default 1), all alike */
static int ngpus(void) { const char *g = getenv("MESHRUN_FAKE_GPUS"); return g && atoi(g) > 0 ? atoi(g) : 1; }
#define BAD_DEV(d) ((d) < 0 || (d) >= ngpus())
int cuDeviceGetCount(int *n) { *n = ngpus(); return 0; }
int cuDeviceGet(int *d, int ordinal) { if (BAD_DEV(ordinal)) return 101; *d = ordinal; return 0; }
int cuDeviceGetAttribute(int *v, int attr, int dev) {
	if (BAD_DEV(dev)) return 101;
	if (attr == 75) *v = 9;
	else if (attr == 76) *v = 0;
	else return 1;
	return 0;
}
int cuDeviceGetName(char *name, int len, int dev) {
	if (BAD_DEV(dev)) return 101;
	snprintf(name, len, "Fake GPU (host memory)");
	return 0;
}
/* lifecycle appends "+what" or "-what" to MESHRUN_FAKE_LIFECYCLE (when set). */
static void lifecycle(char sign, const char *what) {
	const char *logf = getenv("MESHRUN_FAKE_LIFECYCLE");
	FILE *f = logf ? fopen(logf, "a") : NULL;
	if (f) { fprintf(f, "%c%s\n", sign, what); fclose(f); }
}
static int fake_dev; /* the device of the primary context (one per process) */
static int ctx_refs; /* cuDevicePrimaryCtxRetain minus cuDevicePrimaryCtxRelease_v2 */
int cuDevicePrimaryCtxRetain(void **ctx, int dev) {
	if (BAD_DEV(dev)) return 101;
	*ctx = &the_ctx;
	fake_dev = dev;
	__atomic_add_fetch(&ctx_refs, 1, __ATOMIC_SEQ_CST);
	lifecycle('+', "ctx");
	return 0;
}
int cuDevicePrimaryCtxRelease_v2(int dev) {
	if (BAD_DEV(dev)) return 101;
	if (__atomic_sub_fetch(&ctx_refs, 1, __ATOMIC_SEQ_CST) < 0) { __atomic_add_fetch(&ctx_refs, 1, __ATOMIC_SEQ_CST); return 201; }
	lifecycle('-', "ctx");
	return 0;
}
int cuDeviceTotalMem_v2(size_t *bytes, int dev) {
	if (BAD_DEV(dev)) return 101;
	const char *m = getenv("MESHRUN_FAKE_TOTAL_MEM");
	*bytes = m ? (size_t)strtoull(m, NULL, 10) : (size_t)80 << 30;
	return 0;
}
/* A context given back by its last holder is gone: making it current fails. */
int cuCtxSetCurrent(void *ctx) {
	if (ctx != &the_ctx || __atomic_load_n(&ctx_refs, __ATOMIC_SEQ_CST) == 0) return 201;
	current = ctx;
	return 0;
}

/* NCCL's operations (the last block) finish before stream work issued
 * after them: the copies (synchronous with the stream), launches and
 * stream waits finish them first. */
static int nccl_streams(int blocking);

/* ---- memory: every live allocation, so accesses can be checked ---- */
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct alloc { devptr p; size_t n; } *allocs;
static size_t nallocs, capallocs;

/* inside: [p, p+n) lies in one live allocation (n = 0 needs nothing). */
static int inside(devptr p, size_t n) {
	if (n == 0) return 1;
	pthread_mutex_lock(&mem_mu);
	int ok = 0;
	for (size_t i = 0; i < nallocs && !ok; i++)
		ok = p >= allocs[i].p && p + n <= allocs[i].p + allocs[i].n;
	pthread_mutex_unlock(&mem_mu);
	return ok;
}

int cuMemAlloc_v2(devptr *p, size_t n) {
	NEED_CTX;
	if (n == 0) return 1;
	if (failing("cuMemAlloc_v2")) return 2;
	void *m = malloc(n);
	if (!m) return 2;
	memset(m, 0xA5, n); /* device memory starts as garbage */
	pthread_mutex_lock(&mem_mu);
	if (nallocs == capallocs) {
		capallocs = capallocs ? 2 * capallocs : 64;
		allocs = realloc(allocs, capallocs * sizeof *allocs);
	}
	allocs[nallocs].p = (devptr)(uintptr_t)m;
	allocs[nallocs++].n = n;
	pthread_mutex_unlock(&mem_mu);
	*p = (devptr)(uintptr_t)m;
	return 0;
}

int cuMemFree_v2(devptr p) {
	NEED_CTX;
	pthread_mutex_lock(&mem_mu);
	for (size_t i = 0; i < nallocs; i++) {
		if (allocs[i].p == p) {
			allocs[i] = allocs[--nallocs];
			pthread_mutex_unlock(&mem_mu);
			free((void *)(uintptr_t)p);
			return 0;
		}
	}
	pthread_mutex_unlock(&mem_mu);
	return 1;
}

int cuMemcpyHtoD_v2(devptr dst, const void *src, size_t n) {
	NEED_CTX;
	nccl_streams(1);
	if (!inside(dst, n)) return 1;
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}
int cuMemcpyDtoH_v2(void *dst, devptr src, size_t n) {
	NEED_CTX;
	nccl_streams(1);
	if (!inside(src, n)) return 1;
	memcpy(dst, (void *)(uintptr_t)src, n);
	return 0;
}
int cuMemcpyDtoDAsync_v2(devptr dst, devptr src, size_t n, void *stream) {
	NEED_CTX;
	nccl_streams(1);
	(void)stream;
	if (!inside(dst, n) || !inside(src, n)) return 1;
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	return 0;
}
int cuMemsetD8_v2(devptr p, unsigned char v, size_t n) {
	NEED_CTX;
	nccl_streams(1);
	if (!inside(p, n)) return 1;
	if (failing("cuMemsetD8_v2")) return 1;
	memset((void *)(uintptr_t)p, v, n);
	return 0;
}

/* ---- streams and events: the fake runs everything at once ---- */
static int the_stream;
int cuStreamCreate(void **s, unsigned flags) {
	NEED_CTX;
	(void)flags;
	if (failing("cuStreamCreate")) return 2;
	*s = &the_stream;
	lifecycle('+', "stream");
	return 0;
}
int cuStreamSynchronize(void *s) { NEED_CTX; nccl_streams(1); return s == &the_stream || s == NULL ? 0 : 400; }
int cuStreamDestroy_v2(void *s) {
	NEED_CTX;
	if (s != &the_stream) return 400;
	lifecycle('-', "stream");
	return 0;
}

/* ---- events (cuda/events.go) ----
 * The fake's stream has done its work when the call that issued it
 * returns, so an event completes as it is recorded: it keeps the host's
 * monotonic clock at that moment, and the elapsed time between two events
 * is real (a kernel's emulated grid takes measurable time). Handles are
 * checked against the live events, as allocations are; an event never
 * recorded, or made with CU_EVENT_DISABLE_TIMING (2), cannot be timed
 * (CUDA_ERROR_INVALID_HANDLE), as on a GPU. */
struct event { int timing, recorded; long long ns; };
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct event **events;
static size_t nevents, capevents;

static long long mono_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
/* live_event: ev's slot in events, or -1 (call with ev_mu held) */
static long live_event(const void *ev) {
	for (size_t i = 0; i < nevents; i++)
		if (events[i] == ev) return (long)i;
	return -1;
}
int cuEventCreate(void **e, unsigned flags) {
	NEED_CTX;
	if (flags & ~3u) return 1;
	struct event *ev = calloc(1, sizeof *ev);
	if (!ev) return 2;
	ev->timing = !(flags & 2);
	pthread_mutex_lock(&ev_mu);
	if (nevents == capevents) {
		capevents = capevents ? 2 * capevents : 64;
		events = realloc(events, capevents * sizeof *events);
	}
	events[nevents++] = ev;
	pthread_mutex_unlock(&ev_mu);
	*e = ev;
	lifecycle('+', "event");
	return 0;
}
int cuEventDestroy_v2(void *e) {
	NEED_CTX;
	pthread_mutex_lock(&ev_mu);
	long i = live_event(e);
	if (i >= 0) events[i] = events[--nevents];
	pthread_mutex_unlock(&ev_mu);
	if (i < 0) return 400;
	free(e);
	lifecycle('-', "event");
	return 0;
}
int cuEventRecord(void *e, void *s) {
	NEED_CTX;
	if (failing("cuEventRecord")) return 1;
	if (s != &the_stream && s != NULL) return 400;
	pthread_mutex_lock(&ev_mu);
	long i = live_event(e);
	if (i >= 0) { events[i]->recorded = 1; events[i]->ns = mono_ns(); }
	pthread_mutex_unlock(&ev_mu);
	return i < 0 ? 400 : 0;
}
int cuEventSynchronize(void *e) {
	NEED_CTX;
	pthread_mutex_lock(&ev_mu);
	long i = live_event(e);
	pthread_mutex_unlock(&ev_mu);
	return i < 0 ? 400 : 0;
}
int cuEventElapsedTime(float *ms, void *a, void *b) {
	NEED_CTX;
	pthread_mutex_lock(&ev_mu);
	long i = live_event(a), j = live_event(b);
	int rc = 0;
	if (i < 0 || j < 0 || !events[i]->recorded || !events[j]->recorded || !events[i]->timing || !events[j]->timing) rc = 400;
	else *ms = (float)((double)(events[j]->ns - events[i]->ns) / 1e6);
	pthread_mutex_unlock(&ev_mu);
	return rc;
}

/* ---- modules: a "CUBIN" is a shared library's bytes ---- */
static size_t elf_size(const unsigned char *img) {
	/* 64-bit ELF: the section header table (e_shoff, e_shentsize ×
	 * e_shnum) ends the file as the linker writes it. */
	uint64_t shoff;
	uint16_t shentsize, shnum;
	memcpy(&shoff, img + 0x28, 8);
	memcpy(&shentsize, img + 0x3A, 2);
	memcpy(&shnum, img + 0x3C, 2);
	return shoff + (size_t)shentsize * shnum;
}

/* The fake's PTX is a header line naming its virtual architecture, then
 * the same shared library a CUBIN is (see nvrtcGetPTX). */
#define FAKE_PTX "// fake PTX for compute_"

int cuModuleLoadData(void **mod, const void *image) {
	NEED_CTX;
	const unsigned char *img = image;
	if (strncmp(image, FAKE_PTX, strlen(FAKE_PTX)) == 0) {
		/* the driver JIT-compiles PTX for this device: any older target */
		if (atoi((const char *)img + strlen(FAKE_PTX)) > 90) return 209; /* CUDA_ERROR_NO_BINARY_FOR_GPU */
		img = (const unsigned char *)strchr(image, '\n') + 1;
	}
	if (memcmp(img, "\177ELF", 4) != 0 || img[4] != 2) return 200;
	char path[] = "/tmp/meshrun-fake-moduleXXXXXX";
	int fd = mkstemp(path);
	if (fd < 0) return 200;
	size_t n = elf_size(img);
	int ok = write(fd, img, n) == (ssize_t)n;
	close(fd);
	void *h = ok ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
	unlink(path);
	if (!h) return 200;
	*mod = h;
	return 0;
}
int cuModuleUnload(void *mod) { NEED_CTX; return dlclose(mod) ? 400 : 0; }
int cuModuleGetFunction(void **fn, void *mod, const char *name) {
	NEED_CTX;
	char entry[256];
	snprintf(entry, sizeof entry, "%s__emu", name);
	*fn = dlsym(mod, entry);
	return *fn ? 0 : 500;
}

static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
	unsigned shmem, void *stream, void **params, void **extra) {
	NEED_CTX;
	if (!fn) return 400;
	if (gx == 0 || bx == 0 || bx > 1024 || gy != 1 || gz != 1 || by != 1 || bz != 1 || !params || extra) return 1;
	if (stream != &the_stream || shmem) return 1;
	nccl_streams(1);
	pthread_mutex_lock(&launch_mu);
	((void (*)(unsigned, unsigned, void **))fn)(gx, bx, params);
	pthread_mutex_unlock(&launch_mu);
	return 0;
}

/* ---- NVRTC ---- */
struct prog { char *src, *image, *log; size_t size; int ptx; /* XX when compiled for compute_XX, else 0 */ };
int nvrtcVersion(int *major, int *minor) { *major = 13; *minor = 0; return 0; }
const char *nvrtcGetErrorString(int rc) {
	switch (rc) {
	case 0: return "NVRTC_SUCCESS";
	case 3: return "NVRTC_ERROR_INVALID_INPUT";
	case 5: return "NVRTC_ERROR_INVALID_OPTION";
	case 6: return "NVRTC_ERROR_COMPILATION";
	}
	return "NVRTC_ERROR_INTERNAL_ERROR";
}
int nvrtcCreateProgram(struct prog **p, const char *src, const char *name, int nh, const char *const *h, const char *const *hn) {
	(void)name; (void)h; (void)hn;
	if (!src || nh) return 3;
	*p = calloc(1, sizeof **p);
	(*p)->src = strdup(src);
	return 0;
}

static char *slurp(const char *path, size_t *n) {
	FILE *f = fopen(path, "rb");
	if (!f) return NULL;
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(*n + 1);
	*n = fread(b, 1, *n, f);
	b[*n] = 0;
	fclose(f);
	return b;
}

static int spit(const char *path, const char *text) {
	FILE *f = fopen(path, "w");
	if (!f) return 0;
	fputs(text, f);
	return fclose(f) == 0;
}

/* NVRTC contracts a·b + c into a fused multiply-add unless told
 * --fmad=false; so does the C++ compiler with these flags, so a kernel
 * compiled without the option rounds differently here too, as on a GPU. */
#if defined(__x86_64__)
#define FMAD_FLAGS "-ffp-contract=fast -fexpensive-optimizations -mfma" /* GCC contracts at -O1 only with the latter */
#else
#define FMAD_FLAGS "-ffp-contract=fast -fexpensive-optimizations"
#endif

/* The architectures this NVRTC knows: up to MESHRUN_FAKE_MAX_SM (default 90). */
static const int known_archs[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};
static int nknown(void) {
	const char *m = getenv("MESHRUN_FAKE_MAX_SM");
	int max = m ? atoi(m) : 90, n = 0;
	while (n < (int)(sizeof known_archs / sizeof known_archs[0]) && known_archs[n] <= max) n++;
	return n;
}
int nvrtcGetNumSupportedArchs(int *n) { *n = nknown(); return 0; }
int nvrtcGetSupportedArchs(int *archs) { memcpy(archs, known_archs, sizeof(int) * (size_t)nknown()); return 0; }

int nvrtcCompileProgram(struct prog *p, int nopts, const char *const *opts) {
	const char *arch = NULL, *fmad = FMAD_FLAGS;
	for (int i = 0; i < nopts; i++) {
		if (strncmp(opts[i], "--gpu-architecture=sm_", 22) == 0) arch = opts[i] + 19, p->ptx = 0;
		if (strncmp(opts[i], "--gpu-architecture=compute_", 27) == 0) arch = opts[i] + 19, p->ptx = atoi(opts[i] + 27);
		if (strcmp(opts[i], "--fmad=false") == 0) fmad = "-ffp-contract=off";
	}
	if (!arch) { p->log = strdup("fake nvrtc: no --gpu-architecture=sm_XY or compute_XY option"); return 5; }
	const char *maxsm = getenv("MESHRUN_FAKE_MAX_SM");
	if (maxsm && atoi(arch + (p->ptx ? 8 : 3)) > atoi(maxsm)) {
		p->log = strdup("nvrtc: error: invalid value for --gpu-architecture (-arch)");
		return 5;
	}
	if (failing("nvrtcCompileProgram")) { p->log = strdup("fake nvrtc: compilation failed on request (MESHRUN_FAKE_FAIL)"); return 6; }
	const char *emu = getenv("MESHRUN_FAKE_EMU");
	if (!emu) { p->log = strdup("fake nvrtc: MESHRUN_FAKE_EMU (the folder of emu.h) is not set"); return 6; }
	char dir[] = "/tmp/meshrun-fake-nvrtcXXXXXX", path[4200], cmd[8800];
	if (!mkdtemp(dir)) return 6;
	snprintf(path, sizeof path, "%s/prog.cu", dir);
	spit(path, p->src);
	snprintf(path, sizeof path, "%s/wrap.c", dir);
	spit(path, "#define MR_EMU_ENTRIES\n#include \"emu.h\"\nmr_dim3 blockIdx, threadIdx, blockDim, gridDim;\n#include \"prog.cu\"\n");
	/* C++, as NVRTC compiles it: the source must be valid C++ too */
	snprintf(cmd, sizeof cmd, "cd %s && c++ -x c++ -std=c++17 -O1 %s -shared -fPIC -I'%s' -o prog.so wrap.c -lm > log 2>&1", dir, fmad, emu);
	int rc = system(cmd);
	snprintf(path, sizeof path, "%s/log", dir);
	size_t n;
	p->log = slurp(path, &n);
	snprintf(path, sizeof path, "%s/prog.so", dir);
	if (rc == 0) p->image = slurp(path, &p->size);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0) {}
	if (!p->image) return 6;
	const char *logf = getenv("MESHRUN_FAKE_LOG");
	FILE *f = logf ? fopen(logf, "a") : NULL;
	if (f) { fprintf(f, "compiled for %s\n", arch); fclose(f); }
	return 0;
}
/* A program compiled for a virtual architecture (compute_XX) has PTX and
 * no CUBIN, and the other way round, as NVRTC's does. */
int nvrtcGetCUBINSize(struct prog *p, size_t *n) { if (!p->image || p->ptx) return 3; *n = p->size; return 0; }
int nvrtcGetCUBIN(struct prog *p, char *out) { if (!p->image || p->ptx) return 3; memcpy(out, p->image, p->size); return 0; }
static int ptx_header(struct prog *p, char *h, size_t n) { return snprintf(h, n, FAKE_PTX "%d\n", p->ptx); }
int nvrtcGetPTXSize(struct prog *p, size_t *n) {
	char h[64];
	if (!p->image || !p->ptx) return 3;
	*n = (size_t)ptx_header(p, h, sizeof h) + p->size + 1; /* and the NUL that ends PTX */
	return 0;
}
int nvrtcGetPTX(struct prog *p, char *out) {
	if (!p->image || !p->ptx) return 3;
	int k = ptx_header(p, out, 64);
	memcpy(out + k, p->image, p->size);
	out[k + p->size] = 0;
	return 0;
}
int nvrtcGetProgramLogSize(struct prog *p, size_t *n) { *n = p->log ? strlen(p->log) + 1 : 1; return 0; }
int nvrtcGetProgramLog(struct prog *p, char *out) { strcpy(out, p->log ? p->log : ""); return 0; }
int nvrtcDestroyProgram(struct prog **p) {
	free((*p)->src); free((*p)->image); free((*p)->log); free(*p);
	*p = NULL;
	return 0;
}

/* ---- cuBLAS ---- */
struct handle { void *stream; int math; };
int cublasGetVersion_v2(struct handle *h, int *v) { (void)h; *v = 130000; return 0; }
int cublasCreate_v2(struct handle **h) {
	if (current != &the_ctx) return 1;
	if (failing("cublasCreate_v2")) return 3; /* CUBLAS_STATUS_ALLOC_FAILED */
	*h = calloc(1, sizeof **h);
	lifecycle('+', "blas");
	return 0;
}
int cublasDestroy_v2(struct handle *h) {
	if (!h) return 1;
	free(h);
	lifecycle('-', "blas");
	return 0;
}
int cublasSetStream_v2(struct handle *h, void *s) { h->stream = s; return 0; }
int cublasSetMathMode(struct handle *h, int mode) {
	if (mode != 0 && mode != 2 && mode != 3) return 7;
	h->math = mode;
	return 0;
}

/* Element types: CUDA_R_32F 0, CUDA_R_64F 1, CUDA_R_16F 2, CUDA_R_16BF 14.
 * Half elements are read into float and results rounded to nearest, ties
 * to even (the conversions cuBLAS applies with a 32F compute type). */
static size_t esize(int dt) { return dt == 1 ? 8 : dt == 0 ? 4 : 2; }

static float f32_of_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint32_t bits_of_f32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }

static float half_load(uint16_t h, int dt) {
	if (dt == 14) return f32_of_bits((uint32_t)h << 16);
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	if (exp == 0 && man == 0) return f32_of_bits(sign);
	if (exp == 0) { /* subnormal: exactly man · 2^-24 */
		float f = (float)man / 16777216.0f;
		return sign ? -f : f;
	}
	if (exp == 0x1f) return f32_of_bits(sign | 0xff << 23 | man << 13);
	return f32_of_bits(sign | (exp + 127 - 15) << 23 | man << 13);
}

static uint16_t half_store(float f, int dt) {
	uint32_t b = bits_of_f32(f);
	if (dt == 14) {
		if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu)) return (uint16_t)((b >> 16) | 0x40);
		b += 0x7fffu + ((b >> 16) & 1u);
		return (uint16_t)(b >> 16);
	}
	uint32_t sign = (b >> 16) & 0x8000u, man = b & 0x7fffffu;
	int exp = (int)((b >> 23) & 0xff), e = exp - 127 + 15;
	if (exp == 0xff) return (uint16_t)(sign | (man ? 0x7e00u : 0x7c00u));
	if (exp == 0 && man == 0) return (uint16_t)sign;
	if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {
		if (e < -10) return (uint16_t)sign;
		uint32_t m = man | 0x800000u, shift = (uint32_t)(14 - e), half = 1u << (shift - 1);
		uint32_t q = m >> shift, rem = m & ((1u << shift) - 1);
		if (rem > half || (rem == half && (q & 1u))) q++;
		return (uint16_t)(sign | q);
	}
	uint32_t q = (uint32_t)e << 10 | man >> 13, rem = man & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) q++;
	return (uint16_t)(sign | q);
}

static float ldf(const void *p, size_t i, int dt) {
	return dt == 0 ? ((const float *)p)[i] : half_load(((const uint16_t *)p)[i], dt);
}

/* tf32 rounds an f32 to TF32's 10 mantissa bits, to nearest, ties to even:
 * what CUBLAS_COMPUTE_32F_FAST_TF32 does to f32 operands before the tensor
 * cores multiply them (the products are summed in f32). */
static float tf32(float f) {
	uint32_t b = bits_of_f32(f);
	if ((b & 0x7f800000u) == 0x7f800000u) return f; /* inf, nan */
	b += 0xfffu + ((b >> 13) & 1u);
	return f32_of_bits(b & ~0x1fffu);
}

/* one column-major GEMM, C = alpha·op(A)·op(B) (+ beta·C), summed in the
 * compute type (float for 32F and 32F_FAST_TF32, double for 64F) in order;
 * fast: 32F_FAST_TF32's operands rounded to TF32 first */
static int gemm1(int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int lda, const void *B, int ldb,
	const void *beta, void *C, int ldc, int dt, int fast) {
	size_t es = esize(dt);
	int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
	if (!inside((devptr)(uintptr_t)A, ((size_t)(ac - 1) * lda + ar) * es) ||
		!inside((devptr)(uintptr_t)B, ((size_t)(bc - 1) * ldb + br) * es) ||
		!inside((devptr)(uintptr_t)C, ((size_t)(n - 1) * ldc + m) * es)) return 7;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			size_t c = i + (size_t)j * ldc;
			if (dt == 1) {
				const double *a = A, *b = B;
				double s = 0;
				for (int l = 0; l < k; l++) s += a[ta ? l + (size_t)i * lda : i + (size_t)l * lda] * b[tb ? j + (size_t)l * ldb : l + (size_t)j * ldb];
				((double *)C)[c] = *(const double *)alpha * s + (*(const double *)beta ? *(const double *)beta * ((double *)C)[c] : 0);
				continue;
			}
			float s = 0;
			for (int l = 0; l < k; l++) {
				float x = ldf(A, ta ? l + (size_t)i * lda : i + (size_t)l * lda, dt), y = ldf(B, tb ? j + (size_t)l * ldb : l + (size_t)j * ldb, dt);
				if (fast) x = tf32(x), y = tf32(y);
				s += x * y;
			}
			float r = *(const float *)alpha * s + (*(const float *)beta ? *(const float *)beta * ldf(C, c, dt) : 0);
			if (dt == 0) ((float *)C)[c] = r;
			else ((uint16_t *)C)[c] = half_store(r, dt);
		}
	return 0;
}

/* cuBLAS's own checks of a GEMM's arguments, then the types this fake does. */
static int gemm_args(struct handle *h, int ta, int tb, int m, int n, int k, int at, int lda, int bt, int ldb, int ct, int ldc, int compute) {
	if (!h || current != &the_ctx) return 1;
	if (h->stream != &the_stream) return 7;
	if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1) || m < 0 || n < 0 || k < 0) return 7;
	if (lda < (ta ? k : m) || lda < 1 || ldb < (tb ? n : k) || ldb < 1 || ldc < m || ldc < 1) return 7;
	if (at != bt || at != ct) return 15;
	if (!((at == 0 || at == 2 || at == 14) && compute == 68) && !(at == 0 && compute == 77) && !(at == 1 && compute == 70)) return 15;
	return 0;
}

int cublasGemmEx(struct handle *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
	const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
	(void)algo;
	int rc = gemm_args(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
	if (rc) return rc;
	if (failing("cublasGemmEx")) return 13;
	if (m == 0 || n == 0) return 0;
	return gemm1(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, at, compute == 77);
}

int cublasGemmStridedBatchedEx(struct handle *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at,
	int lda, long long sa, const void *B, int bt, int ldb, long long sb, const void *beta, void *C, int ct, int ldc,
	long long sc, int batch, int compute, int algo) {
	(void)algo;
	int rc = gemm_args(h, ta, tb, m, n, k, at, lda, bt, ldb, ct, ldc, compute);
	if (rc) return rc;
	if (batch < 0 || sc < (long long)ldc * n) return 7;
	size_t es = esize(at);
	for (int i = 0; i < batch && rc == 0 && m && n; i++)
		rc = gemm1(ta, tb, m, n, k, alpha, (const char *)A + i * sa * es, lda, (const char *)B + i * sb * es, ldb, beta,
			(char *)C + i * sc * es, ldc, at, compute == 77);
	return rc;
}

/* cuBLASLt: loaded for cuBLAS's sake, unused by the backend. */
size_t cublasLtGetVersion(void) { return 130000; }
int cublasLtCreate(void **h) { *h = NULL; return 15; }
int cublasLtDestroy(void *h) { (void)h; return 0; }
int cublasLtMatmul(void) { return 15; }

/* ---- NCCL: ranks in several processes of this machine ----
 * A communicator is a file under /dev/shm (else /tmp), named by the key
 * the unique id carries, mapped by every member: a header (each member's
 * device, the sequence number of the last operation it posted and of
 * the last it finished, and what that operation is) and two data slots
 * per member, used by operations in turn. An operation (one call, or
 * the calls between ncclGroupStart and ncclGroupEnd) is posted when
 * called: the
 * member copies what it sends into its slot and publishes its list of
 * calls. It completes later, as on a GPU, when the stream is queried or
 * waited for and every member has posted it: then the member reads its
 * peers' slots (collectives match call by call; a receive matches the
 * peer's sends to it in order) and marks it finished. Slots are reused
 * two operations later, once every member has finished with them.
 *
 * The unique id is "MRFNCCL1", a random key, bytes derived from the key,
 * and an FNV-1a hash of the first 120 bytes in the last 8: an id that
 * reaches ncclCommInitRank other than by value fails the check.
 * ncclCommInitRank waits for every member (as NCCL does) and rejects two
 * members on one device (NCCL's "Duplicate GPU detected"); the fake has
 * MESHRUN_FAKE_GPUS devices (default 1). A member that never posts
 * leaves the others' operations unfinished until ncclCommAbort.
 * MESHRUN_FAKE_NCCL_SLOT sets a slot's bytes (default 64 MiB, sparse);
 * MESHRUN_FAKE_NCCL_LOG names a file that every member's join ("init rank
 * R of N") and every posted operation ("op KIND COUNT by rank R", its
 * first call's kind) append a line to. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#define NC_MAXR 16
#define NC_MAXE 64
enum { NC_ALLREDUCE, NC_ALLGATHER, NC_REDUCESCATTER, NC_BROADCAST, NC_REDUCE, NC_SEND, NC_RECV };
typedef struct { char internal[128]; } nc_uid;
struct nc_entry { int32_t kind, dt, op, peer; int64_t count, off; };
struct nc_post { int64_t n; struct nc_entry e[NC_MAXE]; };
struct nc_shared {
	int64_t joined;
	int32_t dev[NC_MAXR]; /* device + 1; 0 until joined */
	int64_t posted[NC_MAXR], done[NC_MAXR];
	struct nc_post post[NC_MAXR][2];
};
struct nc_local { struct nc_entry e; void *send, *recv; };
struct ncomm {
	struct nc_shared *sh;
	char *data;
	size_t slot, mapped;
	int rank, n, async;
	int64_t seq, pending; /* pending: the posted, unfinished operation (0: none) */
	int nlocal;
	struct nc_local local[NC_MAXE];
};

static pthread_mutex_t nc_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncomm *nc_comms[256]; /* this process's live communicators */

static size_t nc_esize(int dt) { return dt == 2 || dt == 3 ? 4 : dt == 4 || dt == 5 || dt == 8 ? 8 : dt == 7 ? 4 : dt == 6 || dt == 9 ? 2 : 1; }
static uint64_t nc_fnv(const unsigned char *p, size_t n) {
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
	return h;
}
static int64_t nc_now_ms(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}
static int64_t nc_patience_ms(void) { return 120000; } /* a blocking wait's bound */
static void nc_log(const char *fmt, int a, long long b, int c) {
	const char *path = getenv("MESHRUN_FAKE_NCCL_LOG");
	FILE *f = path ? fopen(path, "a") : NULL;
	if (!f) return;
	fprintf(f, fmt, a, b, c);
	fputc('\n', f);
	fclose(f);
}

int ncclGetVersion(int *v) { *v = 22800; return 0; }
const char *ncclGetErrorString(int rc) {
	static const char *s[] = {"no error", "unhandled cuda error", "unhandled system error", "internal error",
		"invalid argument", "invalid usage", "remote process exited or there was a network error", "operation in progress"};
	return rc >= 0 && rc < 8 ? s[rc] : "unknown result code";
}

int ncclGetUniqueId(nc_uid *id) {
	uint64_t key = 0;
	FILE *f = fopen("/dev/urandom", "rb");
	if (!f || fread(&key, 8, 1, f) != 1) key = (uint64_t)getpid() * 2654435761u ^ (uint64_t)nc_now_ms();
	if (f) fclose(f);
	memcpy(id->internal, "MRFNCCL1", 8);
	memcpy(id->internal + 8, &key, 8);
	for (int i = 16; i < 120; i++) id->internal[i] = (char)(key >> (i % 57) ^ (uint64_t)i * 131);
	uint64_t h = nc_fnv((unsigned char *)id->internal, 120);
	memcpy(id->internal + 120, &h, 8);
	return 0;
}


int ncclCommInitRank(struct ncomm **out, int n, nc_uid id, int rank) {
	uint64_t h, key;
	memcpy(&h, id.internal + 120, 8);
	if (memcmp(id.internal, "MRFNCCL1", 8) || h != nc_fnv((unsigned char *)id.internal, 120)) {
		fprintf(stderr, "fake NCCL: ncclCommInitRank got a unique id that fails its checksum (not passed by value?)\n");
		return 4;
	}
	if (n < 1 || n > NC_MAXR || rank < 0 || rank >= n) return 4;
	if (current != &the_ctx) return 1;
	memcpy(&key, id.internal + 8, 8);
	const char *sl = getenv("MESHRUN_FAKE_NCCL_SLOT");
	size_t slot = sl ? (size_t)strtoull(sl, NULL, 10) : (size_t)64 << 20;
	size_t head = (sizeof(struct nc_shared) + 4095) & ~(size_t)4095;
	size_t total = head + slot * 2 * (size_t)n;
	char name[96];
	struct stat st;
	const char *dir = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp"; /* a container may lack /dev/shm */
	snprintf(name, sizeof name, "%s/meshrun-fake-nccl-%016llx-%d", dir, (unsigned long long)key, n);
	int fd = open(name, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)total) != 0) {
		fprintf(stderr, "fake NCCL: %s: %s\n", name, strerror(errno));
		if (fd >= 0) close(fd);
		return 2;
	}
	char *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) return 2;
	struct nc_shared *sh = (struct nc_shared *)m;
	if (__atomic_exchange_n(&sh->dev[rank], fake_dev + 1, __ATOMIC_SEQ_CST) != 0) {
		fprintf(stderr, "fake NCCL: rank %d joined twice\n", rank);
		munmap(m, total);
		return 5;
	}
	__atomic_add_fetch(&sh->joined, 1, __ATOMIC_SEQ_CST);
	for (int64_t t0 = nc_now_ms(); __atomic_load_n(&sh->joined, __ATOMIC_SEQ_CST) < n; usleep(200)) {
		if (nc_now_ms() - t0 > nc_patience_ms()) { munmap(m, total); return 6; }
	}
	unlink(name); /* everyone has it mapped */
	for (int p = 0; p < n; p++) {
		if (p != rank && __atomic_load_n(&sh->dev[p], __ATOMIC_SEQ_CST) == fake_dev + 1) {
			fprintf(stderr, "fake NCCL: Duplicate GPU detected: rank %d and rank %d both on device %d\n", rank, p, fake_dev);
			munmap(m, total);
			return 5;
		}
	}
	nc_log("init rank %d of %lld%.0d", rank, n, 0);
	struct ncomm *c = calloc(1, sizeof *c);
	c->sh = sh, c->data = m + head, c->slot = slot, c->mapped = total, c->rank = rank, c->n = n;
	pthread_mutex_lock(&nc_mu);
	for (int i = 0; i < 256; i++)
		if (!nc_comms[i]) { nc_comms[i] = c; break; }
	pthread_mutex_unlock(&nc_mu);
	*out = c;
	return 0;
}

static char *nc_slot(struct ncomm *c, int r, int64_t seq) { return c->data + ((size_t)r * 2 + (size_t)(seq & 1)) * c->slot; }

/* nc_post_op publishes this member's calls as the next operation. */
static int nc_post_op(struct ncomm *c, struct nc_local *ls, int nl) {
	if (c->pending) return 5; /* the backend must wait for each operation */
	int64_t seq = c->seq + 1;
	for (int p = 0; p < c->n; p++) /* the slot is free once everyone is done with seq-2 */
		for (int64_t t0 = nc_now_ms(); __atomic_load_n(&c->sh->done[p], __ATOMIC_ACQUIRE) < seq - 2; usleep(100))
			if (nc_now_ms() - t0 > nc_patience_ms()) return 6;
	struct nc_post *post = &c->sh->post[c->rank][seq & 1];
	char *slot = nc_slot(c, c->rank, seq);
	size_t off = 0;
	for (int i = 0; i < nl; i++) {
		struct nc_entry *e = &ls[i].e;
		size_t bytes = (size_t)e->count * nc_esize(e->dt);
		int sends = e->kind == NC_ALLREDUCE || e->kind == NC_ALLGATHER || e->kind == NC_REDUCE || e->kind == NC_SEND ||
			(e->kind == NC_BROADCAST && e->peer == c->rank);
		if (e->kind == NC_REDUCESCATTER) bytes *= (size_t)c->n, sends = 1;
		e->off = (int64_t)off;
		if (!sends) continue;
		if (off + bytes > c->slot) {
			fprintf(stderr, "fake NCCL: an operation of %zu bytes is over MESHRUN_FAKE_NCCL_SLOT (%zu)\n", off + bytes, c->slot);
			return 4;
		}
		if (!inside((devptr)(uintptr_t)ls[i].send, bytes)) return 4;
		memcpy(slot + off, ls[i].send, bytes);
		off += bytes;
	}
	for (int i = 0; i < nl; i++) post->e[i] = ls[i].e;
	post->n = nl;
	memcpy(c->local, ls, sizeof *ls * (size_t)nl);
	c->nlocal = nl;
	c->seq = c->pending = seq;
	nc_log("op %d %lld by rank %d", ls[0].e.kind, (long long)ls[0].e.count, c->rank);
	__atomic_store_n(&c->sh->posted[c->rank], seq, __ATOMIC_RELEASE);
	return 0;
}

/* nc_fold folds n elements of src into dst (sum or max) in dt. */
static void nc_fold(void *dst, const void *src, int64_t n, int dt, int op) {
#define NC_FOLD(T) do { T *d = dst; const T *s = src; for (int64_t i = 0; i < n; i++) d[i] = op == 2 ? (s[i] > d[i] ? s[i] : d[i]) : d[i] + s[i]; } while (0)
	switch (dt) {
	case 2: NC_FOLD(int32_t); break;
	case 4: NC_FOLD(int64_t); break;
	case 7: NC_FOLD(float); break;
	case 8: NC_FOLD(double); break;
	}
#undef NC_FOLD
}

/* nc_reduce writes into dst the fold over members, in rank order, of n
 * elements at byte offset skip of each member's entry i. */
static void nc_reduce(struct ncomm *c, int i, void *dst, int64_t n, int dt, int op, size_t skip) {
	size_t bytes = (size_t)n * nc_esize(dt);
	for (int p = 0; p < c->n; p++) {
		const char *src = nc_slot(c, p, c->pending) + c->sh->post[p][c->pending & 1].e[i].off + skip;
		if (p == 0) memcpy(dst, src, bytes);
		else nc_fold(dst, src, n, dt, op);
	}
}

/* nc_finish completes the pending operation once every member posted it:
 * 0 when done (or none), 600 (CUDA_ERROR_NOT_READY) when not blocking
 * and a member is missing. */
static int nc_finish(struct ncomm *c, int blocking) {
	int64_t seq = c->pending;
	if (!seq) return 0;
	for (int p = 0; p < c->n; p++) {
		for (int64_t t0 = nc_now_ms(); __atomic_load_n(&c->sh->posted[p], __ATOMIC_ACQUIRE) < seq; usleep(100)) {
			if (!blocking) return 600;
			if (nc_now_ms() - t0 > nc_patience_ms()) { c->async = 6; c->pending = 0; return 0; }
		}
	}
	int recvs[NC_MAXR] = {0};
	for (int i = 0; i < c->nlocal; i++) {
		struct nc_entry *e = &c->local[i].e;
		char *out = c->local[i].recv;
		size_t es = nc_esize(e->dt), bytes = (size_t)e->count * es;
		for (int p = 0; p < c->n && e->kind < NC_SEND; p++) { /* collectives match call by call */
			struct nc_post *pp = &c->sh->post[p][seq & 1];
			if (pp->n != c->nlocal || pp->e[i].kind != e->kind || pp->e[i].count != e->count || pp->e[i].dt != e->dt) {
				fprintf(stderr, "fake NCCL: rank %d's call %d differs from rank %d's\n", p, i, c->rank);
				c->async = 5;
			}
		}
		if (c->async) break;
		switch (e->kind) {
		case NC_ALLREDUCE: nc_reduce(c, i, out, e->count, e->dt, e->op, 0); break;
		case NC_REDUCESCATTER: nc_reduce(c, i, out, e->count, e->dt, e->op, (size_t)c->rank * bytes); break;
		case NC_REDUCE: if (e->peer == c->rank) nc_reduce(c, i, out, e->count, e->dt, e->op, 0); break;
		case NC_ALLGATHER:
			for (int p = 0; p < c->n; p++)
				memcpy(out + (size_t)p * bytes, nc_slot(c, p, seq) + c->sh->post[p][seq & 1].e[i].off, bytes);
			break;
		case NC_BROADCAST:
			memcpy(out, nc_slot(c, e->peer, seq) + c->sh->post[e->peer][seq & 1].e[i].off, bytes);
			break;
		case NC_RECV: { /* the k-th receive from q takes q's k-th send to this rank */
			int q = e->peer, k = recvs[q]++, found = 0;
			struct nc_post *pq = &c->sh->post[q][seq & 1];
			for (int j = 0; j < pq->n && !found; j++) {
				struct nc_entry *s = &pq->e[j];
				if (s->kind == NC_SEND && s->peer == c->rank && k-- == 0) {
					if ((size_t)s->count * nc_esize(s->dt) != bytes) break;
					memcpy(out, nc_slot(c, q, seq) + s->off, bytes);
					found = 1;
				}
			}
			if (!found) {
				fprintf(stderr, "fake NCCL: rank %d receives from rank %d, which sent nothing that matches\n", c->rank, q);
				c->async = 5;
			}
			break;
		}
		}
	}
	c->pending = 0;
	__atomic_store_n(&c->sh->done[c->rank], seq, __ATOMIC_RELEASE);
	return 0;
}

/* nccl_streams finishes (or, not blocking, tries to) every pending
 * operation of this process: stream order, for the driver's calls. */
static int nccl_streams(int blocking) {
	int rc = 0;
	pthread_mutex_lock(&nc_mu);
	for (int i = 0; i < 256; i++)
		if (nc_comms[i] && nc_finish(nc_comms[i], blocking)) rc = 600;
	pthread_mutex_unlock(&nc_mu);
	return rc;
}
int cuStreamQuery(void *s) { NEED_CTX; if (s != &the_stream) return 400; return nccl_streams(0); }

static __thread int nc_depth, nc_gn;
static __thread struct ncomm *nc_gcomm;
static __thread struct nc_local nc_group[NC_MAXE];

int ncclGroupStart(void) { if (!nc_depth++) nc_gn = 0, nc_gcomm = NULL; return 0; }
int ncclGroupEnd(void) {
	if (nc_depth == 0) return 5;
	if (--nc_depth || nc_gn == 0) return 0;
	pthread_mutex_lock(&nc_mu);
	int rc = nc_post_op(nc_gcomm, nc_group, nc_gn);
	pthread_mutex_unlock(&nc_mu);
	return rc;
}

/* nc_call posts one call, or adds it to the open group. */
static int nc_call(struct ncomm *c, int kind, const void *send, void *recv, size_t n, int dt, int op, int peer, void *stream) {
	if (!c || stream != &the_stream || current != &the_ctx) return 4;
	if (dt < 0 || dt > 9 || ((kind == NC_SEND || kind == NC_RECV || kind == NC_BROADCAST || kind == NC_REDUCE) && (peer < 0 || peer >= c->n))) return 4;
	size_t recvBytes = n * nc_esize(dt) * (kind == NC_ALLGATHER ? (size_t)c->n : 1);
	int writes = kind != NC_SEND && (kind != NC_REDUCE || peer == c->rank);
	if (writes && !inside((devptr)(uintptr_t)recv, recvBytes)) return 4;
	struct nc_local l = {{kind, dt, op, peer, (int64_t)n, 0}, (void *)send, recv};
	if (nc_depth) {
		if ((nc_gcomm && nc_gcomm != c) || nc_gn == NC_MAXE) return 5;
		nc_gcomm = c;
		nc_group[nc_gn++] = l;
		return 0;
	}
	pthread_mutex_lock(&nc_mu);
	int rc = nc_post_op(c, &l, 1);
	pthread_mutex_unlock(&nc_mu);
	return rc;
}
int ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, struct ncomm *c, void *st) { return nc_call(c, NC_ALLREDUCE, s, r, n, dt, op, 0, st); }
int ncclAllGather(const void *s, void *r, size_t n, int dt, struct ncomm *c, void *st) { return nc_call(c, NC_ALLGATHER, s, r, n, dt, 0, 0, st); }
int ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op, struct ncomm *c, void *st) { return nc_call(c, NC_REDUCESCATTER, s, r, n, dt, op, 0, st); }
int ncclBroadcast(const void *s, void *r, size_t n, int dt, int root, struct ncomm *c, void *st) { return nc_call(c, NC_BROADCAST, s, r, n, dt, 0, root, st); }
int ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root, struct ncomm *c, void *st) { return nc_call(c, NC_REDUCE, s, r, n, dt, op, root, st); }
int ncclSend(const void *s, size_t n, int dt, int peer, struct ncomm *c, void *st) { return nc_call(c, NC_SEND, s, NULL, n, dt, 0, peer, st); }
int ncclRecv(void *r, size_t n, int dt, int peer, struct ncomm *c, void *st) { return nc_call(c, NC_RECV, NULL, r, n, dt, 0, peer, st); }

int ncclCommGetAsyncError(struct ncomm *c, int *e) { *e = c->async; return 0; }
static int nc_release(struct ncomm *c) {
	pthread_mutex_lock(&nc_mu);
	for (int i = 0; i < 256; i++)
		if (nc_comms[i] == c) nc_comms[i] = NULL;
	pthread_mutex_unlock(&nc_mu);
	munmap(c->sh, c->mapped);
	free(c);
	return 0;
}
/* Abort leaves the pending operation unfinished: its peers' wait on it. */
int ncclCommAbort(struct ncomm *c) { return nc_release(c); }
int ncclCommDestroy(struct ncomm *c) {
	pthread_mutex_lock(&nc_mu);
	nc_finish(c, 1);
	pthread_mutex_unlock(&nc_mu);
	return nc_release(c);
}
