//go:build cgo && linux

// One set of MPI call wrappers, written once and compiled twice by shim_cgo.go:
// with MH = void* and P(x) = om_x for Open MPI (handles are addresses of
// exported globals), and with MH = int and P(x) = mp_x for MPICH (handles are
// 32-bit integer constants). Go passes every handle widened to intptr_t; each
// wrapper narrows it to the library's own type before the call, so neither
// library is called through a prototype whose argument sizes differ from its
// own. Requests and communicators written back by MPI are widened again.
//
// The includer also defines ST_SOURCE and ST_TAG (int indexes of the public
// MPI_Status fields, whose layout differs between the two) and IN_PLACE.

static int P(comm_rank)(intptr_t comm, int *rank) {
	return ((int (*)(MH, int *))f_comm_rank)((MH)comm, rank);
}

static int P(comm_size)(intptr_t comm, int *size) {
	return ((int (*)(MH, int *))f_comm_size)((MH)comm, size);
}

static int P(comm_split)(intptr_t comm, int color, int key, intptr_t *out) {
	MH c;
	int e = ((int (*)(MH, int, int, MH *))f_comm_split)((MH)comm, color, key, &c);
	*out = (intptr_t)c;
	return e;
}

static int P(comm_free)(intptr_t *comm) {
	MH c = (MH)*comm;
	int e = ((int (*)(MH *))f_comm_free)(&c);
	*comm = (intptr_t)c;
	return e;
}

static int P(set_errhandler)(intptr_t comm, intptr_t eh) {
	return ((int (*)(MH, MH))f_comm_set_errhandler)((MH)comm, (MH)eh);
}

static int P(abort)(intptr_t comm, int code) {
	return ((int (*)(MH, int))f_abort)((MH)comm, code);
}

static int P(isend)(const void *buf, int n, intptr_t dt, int to, int tag, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(const void *, int, MH, int, int, MH, MH *))f_isend)(buf, n, (MH)dt, to, tag, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

static int P(irecv)(void *buf, int n, intptr_t dt, int from, int tag, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(void *, int, MH, int, int, MH, MH *))f_irecv)(buf, n, (MH)dt, from, tag, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

// send == NULL means in place (MPI_IN_PLACE differs between the ABIs).
static int P(iallreduce)(const void *send, void *recv, int n, intptr_t dt, intptr_t op, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(const void *, void *, int, MH, MH, MH, MH *))f_iallreduce)(
		send ? send : IN_PLACE, recv, n, (MH)dt, (MH)op, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

// send == NULL: in place, this rank's block is already in recv.
static int P(iallgatherv)(const void *send, int n, void *recv, const int *counts, const int *displs, intptr_t dt, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(const void *, int, MH, void *, const int *, const int *, MH, MH, MH *))f_iallgatherv)(
		send ? send : IN_PLACE, n, (MH)dt, recv, counts, displs, (MH)dt, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

static int P(ireduce_scatter)(const void *send, void *recv, const int *counts, intptr_t dt, intptr_t op, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(const void *, void *, const int *, MH, MH, MH, MH *))f_ireduce_scatter)(
		send, recv, counts, (MH)dt, (MH)op, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

static int P(ialltoallv)(const void *send, const int *scounts, const int *sdispls, void *recv, const int *rcounts, const int *rdispls, intptr_t dt, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(const void *, const int *, const int *, MH, void *, const int *, const int *, MH, MH, MH *))f_ialltoallv)(
		send, scounts, sdispls, (MH)dt, recv, rcounts, rdispls, (MH)dt, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

// recv is read only on the root (MPI ignores it elsewhere).
static int P(ireduce)(const void *send, void *recv, int n, intptr_t dt, intptr_t op, int root, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(const void *, void *, int, MH, MH, int, MH, MH *))f_ireduce)(
		send, recv, n, (MH)dt, (MH)op, root, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

static int P(ibcast)(void *buf, int n, intptr_t dt, int root, intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(void *, int, MH, int, MH, MH *))f_ibcast)(buf, n, (MH)dt, root, (MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

static int P(ibarrier)(intptr_t comm, intptr_t *req) {
	MH r;
	int e = ((int (*)(MH, MH *))f_ibarrier)((MH)comm, &r);
	*req = (intptr_t)r;
	return e;
}

// test polls one request. The status is a local buffer larger than either
// library's MPI_Status; the fields the caller wants are copied out of it.
// When dt is nonzero and the request completed, *count receives MPI_Get_count.
static int P(test)(intptr_t *req, int *done, intptr_t dt, int *source, int *tag, int *count) {
	MH r = (MH)*req;
	int64_t st[8];
	memset(st, 0, sizeof st);
	int e = ((int (*)(MH *, int *, void *))f_test)(&r, done, st);
	*req = (intptr_t)r;
	if (e == 0 && *done) {
		*source = ((int *)st)[ST_SOURCE];
		*tag = ((int *)st)[ST_TAG];
		if (dt) e = ((int (*)(void *, MH, int *))f_get_count)(st, (MH)dt, count);
	}
	return e;
}

static int P(cancel)(intptr_t *req) {
	MH r = (MH)*req;
	int e = ((int (*)(MH *))f_cancel)(&r);
	*req = (intptr_t)r;
	return e;
}
