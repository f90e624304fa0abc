//go:build cgo && linux

package mpi

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void *lib;
static int sh_mpich; // 1: MPICH ABI (int handles); 0: Open MPI ABI (pointer handles)

// Entry points, resolved by name. Their prototypes are spelled out at each
// call (in shim_abi.h), because the handle types differ between libraries.
static void *f_init_thread, *f_initialized, *f_finalized, *f_finalize, *f_abort,
	*f_error_string, *f_get_library_version, *f_comm_rank, *f_comm_size,
	*f_comm_split, *f_comm_free, *f_comm_set_errhandler, *f_isend, *f_irecv,
	*f_iallreduce, *f_iallgatherv, *f_ireduce_scatter, *f_ialltoallv, *f_ibcast, *f_ireduce,
	*f_ibarrier, *f_test, *f_cancel, *f_get_count;

static struct { const char *name; void **fn; } entries[] = {
	{"MPI_Init_thread", &f_init_thread}, {"MPI_Initialized", &f_initialized},
	{"MPI_Finalized", &f_finalized}, {"MPI_Finalize", &f_finalize},
	{"MPI_Abort", &f_abort}, {"MPI_Error_string", &f_error_string},
	{"MPI_Get_library_version", &f_get_library_version},
	{"MPI_Comm_rank", &f_comm_rank}, {"MPI_Comm_size", &f_comm_size},
	{"MPI_Comm_split", &f_comm_split}, {"MPI_Comm_free", &f_comm_free},
	{"MPI_Comm_set_errhandler", &f_comm_set_errhandler},
	{"MPI_Isend", &f_isend}, {"MPI_Irecv", &f_irecv},
	{"MPI_Iallreduce", &f_iallreduce}, {"MPI_Iallgatherv", &f_iallgatherv},
	{"MPI_Ireduce_scatter", &f_ireduce_scatter}, {"MPI_Ialltoallv", &f_ialltoallv},
	{"MPI_Ibcast", &f_ibcast}, {"MPI_Ireduce", &f_ireduce}, {"MPI_Ibarrier", &f_ibarrier},
	{"MPI_Test", &f_test}, {"MPI_Cancel", &f_cancel}, {"MPI_Get_count", &f_get_count},
};

// MPI libraries and the transports under them (Open MPI's opal, UCX) install
// their own handlers for fatal signals, to print a backtrace. They replace
// the Go runtime's, which turn faults in Go code into panics and report the
// rest with goroutine stacks, so the Go handlers are put back after each
// call that may install them: loading (library constructors) and MPI_Init.
static const int guarded[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define NGUARDED (sizeof guarded / sizeof guarded[0])

static void save_signals(struct sigaction *saved) {
	for (size_t i = 0; i < NGUARDED; i++) sigaction(guarded[i], NULL, &saved[i]);
}

static void restore_signals(const struct sigaction *saved) {
	for (size_t i = 0; i < NGUARDED; i++) sigaction(guarded[i], &saved[i], NULL);
}

// sh_open returns NULL on success, else a message (dlerror's or the name of
// a missing entry point). RTLD_GLOBAL: Open MPI's plugins, opened later by
// libmpi itself, resolve their symbols against libmpi's.
static const char *sh_open(const char *path) {
	struct sigaction saved[NGUARDED];
	save_signals(saved);
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	restore_signals(saved);
	if (!h) return dlerror();
	for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
		*entries[i].fn = dlsym(h, entries[i].name);
		if (!*entries[i].fn) return entries[i].name;
	}
	lib = h;
	return NULL;
}

static void sh_set_mpich(int v) { sh_mpich = v; }
static uintptr_t sh_sym(const char *name) { return (uintptr_t)dlsym(lib, name); }

static int sh_version(char *buf, int *len) {
	return ((int (*)(char *, int *))f_get_library_version)(buf, len);
}
static int sh_initialized(int *flag) { return ((int (*)(int *))f_initialized)(flag); }
static int sh_finalized(int *flag) { return ((int (*)(int *))f_finalized)(flag); }
static int sh_init_thread(int required, int *provided) {
	struct sigaction saved[NGUARDED];
	save_signals(saved);
	int e = ((int (*)(int *, char ***, int, int *))f_init_thread)(NULL, NULL, required, provided);
	restore_signals(saved);
	return e;
}
static int sh_finalize(void) { return ((int (*)(void))f_finalize)(); }
static int sh_error_string(int code, char *buf, int *len) {
	return ((int (*)(int, char *, int *))f_error_string)(code, buf, len);
}

#define MH void *
#define P(x) om_##x
#define ST_SOURCE 0
#define ST_TAG 1
#define IN_PLACE ((void *)1)
#include "shim_abi.h"
#undef MH
#undef P
#undef ST_SOURCE
#undef ST_TAG
#undef IN_PLACE

#define MH int
#define P(x) mp_##x
#define ST_SOURCE 2
#define ST_TAG 3
#define IN_PLACE ((void *)-1)
#include "shim_abi.h"

#define PICK(x) (sh_mpich ? mp_##x : om_##x)

static int sh_comm_rank(intptr_t c, int *r) { return PICK(comm_rank)(c, r); }
static int sh_comm_size(intptr_t c, int *s) { return PICK(comm_size)(c, s); }
static int sh_comm_split(intptr_t c, int color, int key, intptr_t *o) { return PICK(comm_split)(c, color, key, o); }
static int sh_comm_free(intptr_t *c) { return PICK(comm_free)(c); }
static int sh_set_errhandler(intptr_t c, intptr_t eh) { return PICK(set_errhandler)(c, eh); }
static int sh_abort(intptr_t c, int code) { return PICK(abort)(c, code); }
static int sh_isend(const void *b, int n, intptr_t dt, int to, int tag, intptr_t c, intptr_t *r) {
	return PICK(isend)(b, n, dt, to, tag, c, r);
}
static int sh_irecv(void *b, int n, intptr_t dt, int from, int tag, intptr_t c, intptr_t *r) {
	return PICK(irecv)(b, n, dt, from, tag, c, r);
}
static int sh_iallreduce(const void *s, void *d, int n, intptr_t dt, intptr_t op, intptr_t c, intptr_t *r) {
	return PICK(iallreduce)(s, d, n, dt, op, c, r);
}
static int sh_iallgatherv(const void *s, int n, void *d, const int *cnt, const int *dis, intptr_t dt, intptr_t c, intptr_t *r) {
	return PICK(iallgatherv)(s, n, d, cnt, dis, dt, c, r);
}
static int sh_ireduce_scatter(const void *s, void *d, const int *cnt, intptr_t dt, intptr_t op, intptr_t c, intptr_t *r) {
	return PICK(ireduce_scatter)(s, d, cnt, dt, op, c, r);
}
static int sh_ialltoallv(const void *s, const int *sc, const int *sd, void *d, const int *rc, const int *rd, intptr_t dt, intptr_t c, intptr_t *r) {
	return PICK(ialltoallv)(s, sc, sd, d, rc, rd, dt, c, r);
}
static int sh_ibcast(void *b, int n, intptr_t dt, int root, intptr_t c, intptr_t *r) {
	return PICK(ibcast)(b, n, dt, root, c, r);
}
static int sh_ireduce(const void *s, void *d, int n, intptr_t dt, intptr_t op, int root, intptr_t c, intptr_t *r) {
	return PICK(ireduce)(s, d, n, dt, op, root, c, r);
}
static int sh_ibarrier(intptr_t c, intptr_t *r) { return PICK(ibarrier)(c, r); }
static int sh_test(intptr_t *r, int *done, intptr_t dt, int *src, int *tag, int *count) {
	return PICK(test)(r, done, dt, src, tag, count);
}
static int sh_cancel(intptr_t *r) { return PICK(cancel)(r); }
*/
import "C"

import (
	"errors"
	"unsafe"
)

func libOpen(path string) error {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	if msg := C.sh_open(p); msg != nil {
		return errors.New(C.GoString(msg))
	}
	return nil
}

func libSym(name string) uintptr {
	p := C.CString(name)
	defer C.free(unsafe.Pointer(p))
	return uintptr(C.sh_sym(p))
}

func libSetABI(k abiKind) {
	v := C.int(0)
	if k == abiMPICH {
		v = 1
	}
	C.sh_set_mpich(v)
}

// libVersion may be called before MPI_Init (MPI-3). 8192 is MPICH's
// MPI_MAX_LIBRARY_VERSION_STRING, the larger of the two.
func libVersion() string {
	buf := (*C.char)(C.malloc(8192))
	defer C.free(unsafe.Pointer(buf))
	var n C.int
	if C.sh_version(buf, &n) != 0 {
		return ""
	}
	return C.GoStringN(buf, n)
}

func libInitialized() (initialized, finalized bool) {
	var a, b C.int
	C.sh_initialized(&a)
	C.sh_finalized(&b)
	return a != 0, b != 0
}

func libInitThread(required int) (provided, rc int) {
	var p C.int
	rc = int(C.sh_init_thread(C.int(required), &p))
	return int(p), rc
}

func libFinalize() int { return int(C.sh_finalize()) }

func libErrorString(code int) string {
	buf := (*C.char)(C.malloc(8192))
	defer C.free(unsafe.Pointer(buf))
	var n C.int
	if C.sh_error_string(C.int(code), buf, &n) != 0 {
		return ""
	}
	return C.GoStringN(buf, n)
}

func libCommRank(c uintptr) (int, int) {
	var r C.int
	rc := C.sh_comm_rank(C.intptr_t(c), &r)
	return int(r), int(rc)
}

func libCommSize(c uintptr) (int, int) {
	var s C.int
	rc := C.sh_comm_size(C.intptr_t(c), &s)
	return int(s), int(rc)
}

func libCommSplit(c uintptr, color, key int) (uintptr, int) {
	var o C.intptr_t
	rc := C.sh_comm_split(C.intptr_t(c), C.int(color), C.int(key), &o)
	return uintptr(o), int(rc)
}

func libCommFree(c uintptr) int {
	h := C.intptr_t(c)
	return int(C.sh_comm_free(&h))
}

func libSetErrhandler(c, eh uintptr) int {
	return int(C.sh_set_errhandler(C.intptr_t(c), C.intptr_t(eh)))
}

func libAbort(c uintptr, code int) int { return int(C.sh_abort(C.intptr_t(c), C.int(code))) }

// The nonblocking starts below hand Go memory to MPI beyond the call; the
// callers pin it (runtime.Pinner) until the request completes.

func libIsend(buf unsafe.Pointer, n int, dt uintptr, to, tag int, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_isend(buf, C.int(n), C.intptr_t(dt), C.int(to), C.int(tag), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIrecv(buf unsafe.Pointer, n int, dt uintptr, from, tag int, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_irecv(buf, C.int(n), C.intptr_t(dt), C.int(from), C.int(tag), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIallreduce(send, recv unsafe.Pointer, n int, dt, op, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_iallreduce(send, recv, C.int(n), C.intptr_t(dt), C.intptr_t(op), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIreduce(send, recv unsafe.Pointer, n int, dt, op uintptr, root int, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_ireduce(send, recv, C.int(n), C.intptr_t(dt), C.intptr_t(op), C.int(root), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIallgatherv(send unsafe.Pointer, n int, recv unsafe.Pointer, counts, displs *int32, dt, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_iallgatherv(send, C.int(n), recv, (*C.int)(unsafe.Pointer(counts)), (*C.int)(unsafe.Pointer(displs)),
		C.intptr_t(dt), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIreduceScatter(send, recv unsafe.Pointer, counts *int32, dt, op, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_ireduce_scatter(send, recv, (*C.int)(unsafe.Pointer(counts)), C.intptr_t(dt), C.intptr_t(op), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIalltoallv(send unsafe.Pointer, scounts, sdispls *int32, recv unsafe.Pointer, rcounts, rdispls *int32, dt, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_ialltoallv(send, (*C.int)(unsafe.Pointer(scounts)), (*C.int)(unsafe.Pointer(sdispls)),
		recv, (*C.int)(unsafe.Pointer(rcounts)), (*C.int)(unsafe.Pointer(rdispls)), C.intptr_t(dt), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIbcast(buf unsafe.Pointer, n int, dt uintptr, root int, c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_ibcast(buf, C.int(n), C.intptr_t(dt), C.int(root), C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

func libIbarrier(c uintptr) (uintptr, int) {
	var r C.intptr_t
	rc := C.sh_ibarrier(C.intptr_t(c), &r)
	return uintptr(r), int(rc)
}

// libTest polls *req; MPI resets it to the null request on completion. With
// dt != 0 a completed receive also reports its element count.
func libTest(req *uintptr, dt uintptr) (done bool, st Status, rc int) {
	r := C.intptr_t(*req)
	var d, src, tag, cnt C.int
	rc = int(C.sh_test(&r, &d, C.intptr_t(dt), &src, &tag, &cnt))
	*req = uintptr(r)
	return d != 0, Status{Source: int(src), Tag: int(tag), Count: int(cnt)}, rc
}

func libCancel(req *uintptr) int {
	r := C.intptr_t(*req)
	rc := int(C.sh_cancel(&r))
	*req = uintptr(r)
	return rc
}
