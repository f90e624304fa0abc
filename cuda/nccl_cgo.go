//go:build cgo && linux

package cuda

/*
#include <stddef.h>
#include <stdint.h>

extern void *f_cuCtxSetCurrent, *f_cuStreamQuery;
extern void *f_ncclCommInitRank, *f_ncclCommDestroy, *f_ncclCommAbort, *f_ncclCommGetAsyncError,
	*f_ncclAllReduce, *f_ncclAllGather, *f_ncclReduceScatter, *f_ncclBroadcast, *f_ncclReduce,
	*f_ncclSend, *f_ncclRecv, *f_ncclGroupStart, *f_ncclGroupEnd;

#define NC_CTX(c) do { int _rc = ((int (*)(void *))f_cuCtxSetCurrent)((void *)(c)); if (_rc) return -_rc; } while (0)

// The id travels by value, as NCCL's prototype says: Go passes its
// address and the C compiler lays the 128 bytes out for the call.
typedef struct { char internal[128]; } nc_uid;
static int nc_init(uintptr_t ctx, void **comm, int nranks, const nc_uid *id, int rank) {
	NC_CTX(ctx);
	return ((int (*)(void **, int, nc_uid, int))f_ncclCommInitRank)(comm, nranks, *id, rank);
}
static int nc_destroy(uintptr_t ctx, uintptr_t comm) { NC_CTX(ctx); return ((int (*)(void *))f_ncclCommDestroy)((void *)comm); }
static int nc_abort(uintptr_t ctx, uintptr_t comm) { NC_CTX(ctx); return ((int (*)(void *))f_ncclCommAbort)((void *)comm); }
static int nc_asyncError(uintptr_t comm, int *err) { return ((int (*)(void *, int *))f_ncclCommGetAsyncError)((void *)comm, err); }
// A CUDA status comes back negated, so it is not read as an ncclResult.
static int nc_streamQuery(uintptr_t ctx, uintptr_t s) { NC_CTX(ctx); return ((int (*)(void *))f_cuStreamQuery)((void *)s); }

// One NCCL call: ops runs a list of them, inside ncclGroupStart/End when
// there are several (the send/recv pairs of an all-to-all, the broadcasts
// of an uneven all-gather), with the context current on this thread.
typedef struct { int64_t kind, send, recv, count, dt, op, peer; } nc_op;
enum { NC_ALLREDUCE, NC_ALLGATHER, NC_REDUCESCATTER, NC_BROADCAST, NC_REDUCE, NC_SEND, NC_RECV };
typedef void *vp;
static int nc_one(const nc_op *o, void *comm, void *s) {
	vp a = (vp)(uintptr_t)o->send, b = (vp)(uintptr_t)o->recv;
	size_t n = (size_t)o->count;
	int dt = (int)o->dt, op = (int)o->op, peer = (int)o->peer;
	switch (o->kind) {
	case NC_ALLREDUCE: return ((int (*)(vp, vp, size_t, int, int, vp, vp))f_ncclAllReduce)(a, b, n, dt, op, comm, s);
	case NC_ALLGATHER: return ((int (*)(vp, vp, size_t, int, vp, vp))f_ncclAllGather)(a, b, n, dt, comm, s);
	case NC_REDUCESCATTER: return ((int (*)(vp, vp, size_t, int, int, vp, vp))f_ncclReduceScatter)(a, b, n, dt, op, comm, s);
	case NC_BROADCAST: return ((int (*)(vp, vp, size_t, int, int, vp, vp))f_ncclBroadcast)(a, b, n, dt, peer, comm, s);
	case NC_REDUCE: return ((int (*)(vp, vp, size_t, int, int, int, vp, vp))f_ncclReduce)(a, b, n, dt, op, peer, comm, s);
	case NC_SEND: return ((int (*)(vp, size_t, int, int, vp, vp))f_ncclSend)(a, n, dt, peer, comm, s);
	case NC_RECV: return ((int (*)(vp, size_t, int, int, vp, vp))f_ncclRecv)(b, n, dt, peer, comm, s);
	}
	return 4; // ncclInvalidArgument
}
static int nc_ops(uintptr_t ctx, uintptr_t comm, uintptr_t s, const nc_op *ops, int n) {
	NC_CTX(ctx);
	int grouped = n > 1, rc = 0;
	if (grouped && (rc = ((int (*)(void))f_ncclGroupStart)())) return rc;
	for (int i = 0; i < n && !rc; i++) rc = nc_one(&ops[i], (void *)comm, (void *)s);
	if (grouped) {
		int end = ((int (*)(void))f_ncclGroupEnd)();
		if (!rc) rc = end;
	}
	return rc;
}
*/
import "C"

import "unsafe"

func ncInit(ctx uintptr, nranks int, id *UniqueID, rank int) (uintptr, int) {
	var comm unsafe.Pointer
	rc := C.nc_init(ptr(ctx), &comm, C.int(nranks), (*C.nc_uid)(unsafe.Pointer(id)), C.int(rank))
	return uintptr(comm), int(rc)
}
func ncDestroy(ctx, comm uintptr) int { return int(C.nc_destroy(ptr(ctx), ptr(comm))) }
func ncAbort(ctx, comm uintptr) int   { return int(C.nc_abort(ptr(ctx), ptr(comm))) }
func ncAsyncError(comm uintptr) (int, int) {
	var e C.int
	rc := C.nc_asyncError(ptr(comm), &e)
	return int(e), int(rc)
}
func ncStreamQuery(ctx, s uintptr) int { return int(C.nc_streamQuery(ptr(ctx), ptr(s))) }

func ncOps(ctx, comm, s uintptr, ops []ncOp) int {
	if len(ops) == 0 {
		return 0
	}
	return int(C.nc_ops(ptr(ctx), ptr(comm), ptr(s), (*C.nc_op)(unsafe.Pointer(&ops[0])), C.int(len(ops))))
}
