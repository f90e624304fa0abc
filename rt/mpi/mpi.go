package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MPI_THREAD_* levels; the same numbers in both ABIs.
const (
	threadSerialized = 2
	threadMultiple   = 3
)

// Undefined is the color that leaves a rank out of every group in Split
// (MPI_UNDEFINED, -32766 in both ABIs).
const Undefined = -32766

// AnySource and AnyTag match any sender or tag in Recv. They are this
// package's values; Recv maps them to the library's (which differ).
const (
	AnySource = -1
	AnyTag    = -1
)

var (
	// initMu serialises Init and Finalize. phase and world are atomics so
	// that operations and Abort never wait behind a slow Init or Finalize.
	initMu sync.Mutex
	phase  atomic.Int32
	world  atomic.Pointer[Comm]

	// requestLevel is what Init asks for; tests lower it to exercise the
	// SERIALIZED path.
	requestLevel = threadMultiple

	// callSem serialises MPI calls when the library granted only
	// MPI_THREAD_SERIALIZED; serial is written once, in Init. A channel
	// rather than a mutex, so that waiting for it honours a deadline too
	// (a call stuck inside MPI would otherwise hold up every other one).
	callSem = make(chan struct{}, 1)
	serial  bool

	// abandoned keeps the pins of requests that timed out: MPI may still
	// write into their buffers, so the memory must stay put and alive.
	abandonMu sync.Mutex
	abandoned []*runtime.Pinner
)

// lockMPI takes the right to call MPI, or reports false when ctx ends first.
func lockMPI(ctx context.Context) bool {
	if !serial {
		return true
	}
	select {
	case callSem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func unlockMPI() {
	if serial {
		<-callSem
	}
}

// The life cycle, in phase.
const (
	phaseNone     = iota
	phaseStarting // MPI_Init_thread called, may still be running
	phaseUp       // MPI initialised (MPI_Abort works) but not usable here
	phaseReady    // Init succeeded
	phaseDone     // Finalize called
)

// DefaultTimeout bounds every operation whose context has no deadline, so
// that no call can hang for ever. MESHRUN_MPI_TIMEOUT (a Go duration such as
// "90s") sets it at start-up; the default is five minutes.
var DefaultTimeout = envDuration("MESHRUN_MPI_TIMEOUT", 5*time.Minute)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

func withDefault(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// TimeoutError reports an operation that did not complete before its
// context ended. The operation is still pending inside MPI (its buffers stay
// pinned), and the peers are probably stuck too: the caller should Abort.
type TimeoutError struct {
	Op    string        // the Go-level operation, e.g. "Allreduce"
	After time.Duration // how long it waited
	Cause error         // context.DeadlineExceeded or context.Canceled
}

func (e *TimeoutError) Error() string {
	what := "timed out"
	if errors.Is(e.Cause, context.Canceled) {
		what = "was cancelled"
	}
	return fmt.Sprintf("mpi: %s %s after %v; it is still pending, call Abort", e.Op, what, e.After.Round(time.Millisecond))
}

func (e *TimeoutError) Unwrap() error { return e.Cause }

// Error is a failure code returned by the library (MPI_ERRORS_RETURN is set
// on the world communicator, so errors come back instead of aborting).
type Error struct {
	Op   string
	Code int
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s failed: %s (MPI error %d)", e.Op, e.Msg, e.Code)
}

func codeErr(op string, rc int) error {
	if rc == 0 {
		return nil
	}
	return &Error{Op: op, Code: rc, Msg: oneLine(libErrorString(rc))}
}

// oneLine keeps the summary of MPICH's multi-line messages ("Message
// truncated, error stack:\n...") and joins anything else onto one line.
func oneLine(msg string) string {
	if head, _, ok := strings.Cut(msg, ", error stack:"); ok {
		msg = head
	}
	return strings.Join(strings.Fields(msg), " ")
}

// blocking runs a call that has no nonblocking form (init, finalize,
// communicator management) on its own goroutine, so that the caller gets
// control back at the deadline even if the call never returns.
func blocking(ctx context.Context, op string, fn func() int) error {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	t0 := time.Now()
	done := make(chan int, 1)
	go func() {
		lockMPI(context.Background()) // the caller stops waiting at its deadline
		rc := fn()
		unlockMPI()
		done <- rc
	}()
	select {
	case rc := <-done:
		return codeErr(op, rc)
	case <-ctx.Done():
		return &TimeoutError{Op: op, After: time.Since(t0), Cause: ctx.Err()}
	}
}

// Init loads the library and initialises MPI, asking for
// MPI_THREAD_MULTIPLE. MPI_THREAD_SERIALIZED is accepted too: every call is
// then made under one lock, which is all SERIALIZED requires, since any OS
// thread may call MPI as long as no two do at once. (FUNNELED would tie MPI
// to one OS thread, which goroutines cannot promise without routing every
// call through a locked thread; neither Open MPI nor MPICH grants less than
// MULTIPLE in practice, so that is not supported.) Calling Init again is a
// no-op.
func Init(ctx context.Context) error {
	if err := Load(); err != nil {
		return err
	}
	initMu.Lock()
	defer initMu.Unlock()
	switch phase.Load() {
	case phaseReady:
		return nil
	case phaseDone:
		return errors.New("mpi: Init after Finalize")
	case phaseStarting, phaseUp:
		return errors.New("mpi: an earlier Init failed; call Abort")
	}
	if already, _ := libInitialized(); already {
		return errors.New("mpi: MPI was initialised outside this package")
	}
	phase.Store(phaseStarting)
	var provided int
	err := blocking(ctx, "Init", func() int {
		p, rc := libInitThread(requestLevel)
		provided = p
		return rc
	})
	if err != nil {
		return err
	}
	phase.Store(phaseUp)
	if provided < threadSerialized {
		return fmt.Errorf("mpi: %s granted thread level %d, need MPI_THREAD_SERIALIZED (2) or more", lib.abi, provided)
	}
	serial = provided < threadMultiple
	if rc := libSetErrhandler(lib.h.world, lib.h.errorsReturn); rc != 0 {
		return codeErr("MPI_Comm_set_errhandler", rc)
	}
	w, err := newComm(lib.h.world, true)
	if err != nil {
		return err
	}
	world.Store(w)
	phase.Store(phaseReady)
	return nil
}

// Initialized reports whether Init succeeded and Finalize has not run.
func Initialized() bool { return phase.Load() == phaseReady }

// ThreadMultiple reports whether the library granted MPI_THREAD_MULTIPLE
// (false: calls are serialised by a lock).
func ThreadMultiple() bool { return Initialized() && !serial }

// Finalize shuts MPI down. Every rank must call it; it waits for the others.
func Finalize(ctx context.Context) error {
	initMu.Lock()
	defer initMu.Unlock()
	if phase.Load() != phaseReady {
		return nil
	}
	phase.Store(phaseDone)
	return blocking(ctx, "Finalize", libFinalize)
}

// Abort ends every rank of the job with the given exit code; it does not
// return. It takes no lock, so it works while another goroutine is stuck in
// MPI, which is when it is needed. Without MPI it just exits.
func Abort(code int) {
	if p := phase.Load(); p == phaseUp || p == phaseReady {
		libAbort(lib.h.world, code)
	}
	os.Exit(code)
}

// ready says whether c can be used now.
func ready(c *Comm) error {
	if !Initialized() {
		return errors.New("mpi: not initialised (call Init) or already finalised")
	}
	if c == nil || c.h == lib.h.commNull {
		return errors.New("mpi: nil or freed communicator")
	}
	return nil
}

// Comm is a communicator: a group of ranks that run collectives together.
type Comm struct {
	h          uintptr
	rank, size int
	world      bool
}

func newComm(h uintptr, isWorld bool) (*Comm, error) {
	r, rc := libCommRank(h)
	if rc != 0 {
		return nil, codeErr("MPI_Comm_rank", rc)
	}
	s, rc := libCommSize(h)
	if rc != 0 {
		return nil, codeErr("MPI_Comm_size", rc)
	}
	return &Comm{h: h, rank: r, size: s, world: isWorld}, nil
}

// World is MPI_COMM_WORLD, or nil before Init.
func World() *Comm { return world.Load() }

// Rank is this process's rank in c.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks in c.
func (c *Comm) Size() int { return c.size }

func (c *Comm) String() string {
	return "comm(rank " + strconv.Itoa(c.rank) + " of " + strconv.Itoa(c.size) + ")"
}

// Split partitions c: ranks passing the same color form one new
// communicator, ordered by key (ties by rank in c). A rank passing
// Undefined gets nil. Every rank of c must call it.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if err := ready(c); err != nil {
		return nil, err
	}
	if color < 0 && color != Undefined {
		return nil, fmt.Errorf("mpi: Split color %d: must be >= 0 or Undefined", color)
	}
	var h uintptr
	err := blocking(ctx, "Split", func() int {
		var rc int
		h, rc = libCommSplit(c.h, color, key)
		return rc
	})
	if err != nil {
		return nil, err
	}
	if h == lib.h.commNull {
		return nil, nil
	}
	return newComm(h, false)
}

// Free releases a communicator made by Split. The world cannot be freed.
func (c *Comm) Free() error {
	if c == nil {
		return nil
	}
	if c.world {
		return errors.New("mpi: cannot free the world communicator")
	}
	if err := ready(c); err != nil {
		return err
	}
	err := blocking(context.Background(), "Free", func() int { return libCommFree(c.h) })
	if err == nil {
		c.h = lib.h.commNull
	}
	return err
}
