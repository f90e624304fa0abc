//go:build cgo && linux

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// Library indices, as Lib in search.go.
enum { L_DRIVER, L_NVRTC, L_CUBLASLT, L_CUBLAS, L_NCCL, L_COUNT };

static void *handles[L_COUNT];

// The entry points the backend will call, by library. All are resolved at
// load time, so a library too old to have one fails to load with its name
// rather than later, mid-run. They are not static: driver_cgo.go's
// wrappers call through them.
void *f_cuInit, *f_cuDriverGetVersion, *f_cuGetErrorString, *f_cuDeviceGetCount,
	*f_cuDeviceGet, *f_cuDeviceGetAttribute, *f_cuDevicePrimaryCtxRetain, *f_cuCtxSetCurrent,
	*f_cuMemAlloc, *f_cuMemFree, *f_cuMemcpyHtoD, *f_cuMemcpyDtoH, *f_cuMemcpyDtoDAsync,
	*f_cuModuleLoadData, *f_cuModuleGetFunction, *f_cuLaunchKernel, *f_cuStreamCreate,
	*f_cuStreamSynchronize, *f_cuEventCreate, *f_cuEventRecord, *f_cuEventElapsedTime,
	*f_cuGetErrorName, *f_cuMemsetD8, *f_cuModuleUnload, *f_cuStreamDestroy, *f_cuDeviceGetName,
	*f_cuDevicePrimaryCtxRelease, *f_cuDeviceTotalMem;
void *f_nvrtcVersion, *f_nvrtcCreateProgram, *f_nvrtcCompileProgram, *f_nvrtcGetCUBINSize,
	*f_nvrtcGetCUBIN, *f_nvrtcGetProgramLogSize, *f_nvrtcGetProgramLog, *f_nvrtcDestroyProgram,
	*f_nvrtcGetErrorString, *f_nvrtcGetPTXSize, *f_nvrtcGetPTX, *f_nvrtcGetNumSupportedArchs,
	*f_nvrtcGetSupportedArchs;
void *f_cublasLtGetVersion, *f_cublasLtCreate, *f_cublasLtDestroy, *f_cublasLtMatmul;
void *f_cublasGetVersion, *f_cublasCreate, *f_cublasDestroy, *f_cublasSetStream,
	*f_cublasSetMathMode, *f_cublasGemmEx, *f_cublasGemmStridedBatchedEx;
void *f_ncclGetVersion, *f_ncclGetUniqueId, *f_ncclCommInitRank, *f_ncclCommDestroy,
	*f_ncclCommAbort, *f_ncclGetErrorString, *f_ncclAllReduce, *f_ncclAllGather,
	*f_ncclReduceScatter, *f_ncclBroadcast, *f_ncclSend, *f_ncclRecv, *f_ncclGroupStart,
	*f_ncclGroupEnd;
// events (cuda/events.go; cuEventCreate, Record and ElapsedTime are above)
void *f_cuEventSynchronize, *f_cuEventDestroy;
// NCCL's comm (nccl_cgo.go): reduce to a root, errors a kernel reports
// later, and the stream poll a collective's timeout needs.
void *f_ncclReduce, *f_ncclCommGetAsyncError, *f_cuStreamQuery;

static struct { int lib; const char *name; void **fn; } entries[] = {
	{L_DRIVER, "cuInit", &f_cuInit}, {L_DRIVER, "cuDriverGetVersion", &f_cuDriverGetVersion},
	{L_DRIVER, "cuGetErrorString", &f_cuGetErrorString}, {L_DRIVER, "cuDeviceGetCount", &f_cuDeviceGetCount},
	{L_DRIVER, "cuDeviceGet", &f_cuDeviceGet}, {L_DRIVER, "cuDeviceGetAttribute", &f_cuDeviceGetAttribute},
	{L_DRIVER, "cuDevicePrimaryCtxRetain", &f_cuDevicePrimaryCtxRetain},
	{L_DRIVER, "cuCtxSetCurrent", &f_cuCtxSetCurrent}, {L_DRIVER, "cuMemAlloc_v2", &f_cuMemAlloc},
	{L_DRIVER, "cuMemFree_v2", &f_cuMemFree}, {L_DRIVER, "cuMemcpyHtoD_v2", &f_cuMemcpyHtoD},
	{L_DRIVER, "cuMemcpyDtoH_v2", &f_cuMemcpyDtoH}, {L_DRIVER, "cuMemcpyDtoDAsync_v2", &f_cuMemcpyDtoDAsync},
	{L_DRIVER, "cuModuleLoadData", &f_cuModuleLoadData}, {L_DRIVER, "cuModuleGetFunction", &f_cuModuleGetFunction},
	{L_DRIVER, "cuLaunchKernel", &f_cuLaunchKernel}, {L_DRIVER, "cuStreamCreate", &f_cuStreamCreate},
	{L_DRIVER, "cuStreamSynchronize", &f_cuStreamSynchronize}, {L_DRIVER, "cuEventCreate", &f_cuEventCreate},
	{L_DRIVER, "cuEventRecord", &f_cuEventRecord}, {L_DRIVER, "cuEventElapsedTime", &f_cuEventElapsedTime},
	{L_DRIVER, "cuGetErrorName", &f_cuGetErrorName}, {L_DRIVER, "cuMemsetD8_v2", &f_cuMemsetD8},
	{L_DRIVER, "cuModuleUnload", &f_cuModuleUnload}, {L_DRIVER, "cuStreamDestroy_v2", &f_cuStreamDestroy},
	{L_DRIVER, "cuDeviceGetName", &f_cuDeviceGetName},
	{L_DRIVER, "cuDevicePrimaryCtxRelease_v2", &f_cuDevicePrimaryCtxRelease},
	{L_DRIVER, "cuDeviceTotalMem_v2", &f_cuDeviceTotalMem},
	{L_NVRTC, "nvrtcVersion", &f_nvrtcVersion}, {L_NVRTC, "nvrtcCreateProgram", &f_nvrtcCreateProgram},
	{L_NVRTC, "nvrtcCompileProgram", &f_nvrtcCompileProgram}, {L_NVRTC, "nvrtcGetCUBINSize", &f_nvrtcGetCUBINSize},
	{L_NVRTC, "nvrtcGetCUBIN", &f_nvrtcGetCUBIN}, {L_NVRTC, "nvrtcGetProgramLogSize", &f_nvrtcGetProgramLogSize},
	{L_NVRTC, "nvrtcGetProgramLog", &f_nvrtcGetProgramLog}, {L_NVRTC, "nvrtcDestroyProgram", &f_nvrtcDestroyProgram},
	{L_NVRTC, "nvrtcGetErrorString", &f_nvrtcGetErrorString}, {L_NVRTC, "nvrtcGetPTXSize", &f_nvrtcGetPTXSize},
	{L_NVRTC, "nvrtcGetPTX", &f_nvrtcGetPTX}, {L_NVRTC, "nvrtcGetNumSupportedArchs", &f_nvrtcGetNumSupportedArchs},
	{L_NVRTC, "nvrtcGetSupportedArchs", &f_nvrtcGetSupportedArchs},
	{L_CUBLASLT, "cublasLtGetVersion", &f_cublasLtGetVersion}, {L_CUBLASLT, "cublasLtCreate", &f_cublasLtCreate},
	{L_CUBLASLT, "cublasLtDestroy", &f_cublasLtDestroy}, {L_CUBLASLT, "cublasLtMatmul", &f_cublasLtMatmul},
	{L_CUBLAS, "cublasGetVersion_v2", &f_cublasGetVersion}, {L_CUBLAS, "cublasCreate_v2", &f_cublasCreate},
	{L_CUBLAS, "cublasDestroy_v2", &f_cublasDestroy}, {L_CUBLAS, "cublasSetStream_v2", &f_cublasSetStream},
	{L_CUBLAS, "cublasSetMathMode", &f_cublasSetMathMode}, {L_CUBLAS, "cublasGemmEx", &f_cublasGemmEx},
	{L_CUBLAS, "cublasGemmStridedBatchedEx", &f_cublasGemmStridedBatchedEx},
	{L_NCCL, "ncclGetVersion", &f_ncclGetVersion}, {L_NCCL, "ncclGetUniqueId", &f_ncclGetUniqueId},
	{L_NCCL, "ncclCommInitRank", &f_ncclCommInitRank}, {L_NCCL, "ncclCommDestroy", &f_ncclCommDestroy},
	{L_NCCL, "ncclCommAbort", &f_ncclCommAbort}, {L_NCCL, "ncclGetErrorString", &f_ncclGetErrorString},
	{L_NCCL, "ncclAllReduce", &f_ncclAllReduce}, {L_NCCL, "ncclAllGather", &f_ncclAllGather},
	{L_NCCL, "ncclReduceScatter", &f_ncclReduceScatter}, {L_NCCL, "ncclBroadcast", &f_ncclBroadcast},
	{L_NCCL, "ncclSend", &f_ncclSend}, {L_NCCL, "ncclRecv", &f_ncclRecv},
	{L_NCCL, "ncclGroupStart", &f_ncclGroupStart}, {L_NCCL, "ncclGroupEnd", &f_ncclGroupEnd},
	// events (cuda/events.go)
	{L_DRIVER, "cuEventSynchronize", &f_cuEventSynchronize}, {L_DRIVER, "cuEventDestroy_v2", &f_cuEventDestroy},
	{L_NCCL, "ncclReduce", &f_ncclReduce}, {L_NCCL, "ncclCommGetAsyncError", &f_ncclCommGetAsyncError},
	{L_DRIVER, "cuStreamQuery", &f_cuStreamQuery},
};
#define NENTRIES (sizeof entries / sizeof entries[0])

static int sh_entry_count(void) { return (int)NENTRIES; }
static const char *sh_entry(int i, int *lib) { *lib = entries[i].lib; return entries[i].name; }

// sh_open returns NULL on success, else dlerror's message or the name of
// the first missing entry point (and closes the library again).
static const char *sh_open(int lib, const char *path, int *missing) {
	*missing = 0;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
	for (size_t i = 0; i < NENTRIES; i++) {
		if (entries[i].lib != lib) continue;
		*entries[i].fn = dlsym(h, entries[i].name);
		if (!*entries[i].fn) {
			*missing = 1;
			dlclose(h);
			return entries[i].name;
		}
	}
	handles[lib] = h;
	return NULL;
}

// Version queries, one per library; each returns the library's status code.
static int sh_cuDriverGetVersion(int *v) { return ((int (*)(int *))f_cuDriverGetVersion)(v); }
static int sh_nvrtcVersion(int *major, int *minor) { return ((int (*)(int *, int *))f_nvrtcVersion)(major, minor); }
static size_t sh_cublasLtGetVersion(void) { return ((size_t (*)(void))f_cublasLtGetVersion)(); }
static int sh_ncclGetVersion(int *v) { return ((int (*)(int *))f_ncclGetVersion)(v); }

// NCCL's unique id is a 128-byte struct that ncclCommInitRank takes by
// value; Go hands the shim a pointer and C copies it into the call.
typedef struct { char internal[128]; } sh_ncclUniqueId;
static int sh_ncclGetUniqueId(sh_ncclUniqueId *id) {
	return ((int (*)(sh_ncclUniqueId *))f_ncclGetUniqueId)(id);
}
static int sh_ncclCommInitRank(void **comm, int nranks, const sh_ncclUniqueId *id, int rank) {
	return ((int (*)(void **, int, sh_ncclUniqueId, int))f_ncclCommInitRank)(comm, nranks, *id, rank);
}
static const char *sh_ncclGetErrorString(int code) {
	return ((const char *(*)(int))f_ncclGetErrorString)(code);
}
*/
import "C"

import "unsafe"

const haveDlopen = true

// dlOpen opens path as lib and resolves its entry points. missing reports
// that the file loaded but lacks the named entry point.
func dlOpen(lib Lib, path string) (msg string, missing bool, ok bool) {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var m C.int
	if r := C.sh_open(C.int(lib), p, &m); r != nil {
		return C.GoString(r), m != 0, false
	}
	return "", false, true
}

// entryPoints lists the shim's table: every symbol each library must export.
func entryPoints() map[Lib][]string {
	out := map[Lib][]string{}
	for i := 0; i < int(C.sh_entry_count()); i++ {
		var lib C.int
		name := C.GoString(C.sh_entry(C.int(i), &lib))
		out[Lib(lib)] = append(out[Lib(lib)], name)
	}
	return out
}

func driverVersion() (int, int) {
	var v C.int
	rc := C.sh_cuDriverGetVersion(&v)
	return int(v), int(rc)
}

func nvrtcVersion() (int, int, int) {
	var a, b C.int
	rc := C.sh_nvrtcVersion(&a, &b)
	return int(a), int(b), int(rc)
}

func cublasLtVersion() int { return int(C.sh_cublasLtGetVersion()) }

func ncclVersion() (int, int) {
	var v C.int
	rc := C.sh_ncclGetVersion(&v)
	return int(v), int(rc)
}

func ncclGetUniqueID(id *UniqueID) int {
	return int(C.sh_ncclGetUniqueId((*C.sh_ncclUniqueId)(unsafe.Pointer(id))))
}

func ncclCommInitRank(nranks int, id *UniqueID, rank int) (uintptr, int) {
	var comm unsafe.Pointer
	rc := C.sh_ncclCommInitRank(&comm, C.int(nranks), (*C.sh_ncclUniqueId)(unsafe.Pointer(id)), C.int(rank))
	return uintptr(comm), int(rc)
}

func ncclErrorString(code int) string { return C.GoString(C.sh_ncclGetErrorString(C.int(code))) }
