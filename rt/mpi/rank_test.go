package mpi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRank is the program each rank runs under a launcher (launch_test.go).
// A failed check prints why and aborts the job, so that no rank waits for a
// peer that has given up.
func TestRank(t *testing.T) {
	mode := os.Getenv("MESHRUN_MPI_TEST_MODE")
	if mode == "" {
		t.Skip("runs only as a rank under mpirun (TestUnderLaunchers)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if mode == "serialized" {
		requestLevel = threadSerialized
	}
	if err := Init(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Init:", err)
		os.Exit(2)
	}
	w := World()
	if li := Launcher(); mode != "singleton" && (li.Rank != w.Rank() || li.Size != w.Size() || li.LocalRank < 0) {
		fail(w, "Launcher() = %+v, MPI says rank %d of %d", li, w.Rank(), w.Size())
	}
	if ThreadMultiple() == (mode == "serialized") {
		fail(w, "mode %s: ThreadMultiple() = %v", mode, ThreadMultiple())
	}
	switch mode {
	case "collectives":
		rankCollectives(ctx, w)
	case "singleton":
		// Started without a launcher: MPI makes a world of one.
		if w.Size() != 1 {
			fail(w, "singleton world of %d", w.Size())
		}
		g := group{"world", w, seq(1)}
		allreduce[float64](ctx, w, g)
		allgatherv[int32](ctx, w, g)
		alltoallv[float32](ctx, w, g)
		bcast[byte](ctx, w, g)
	case "serialized":
		// Under the lock: a sample of each kind of call, then the
		// concurrent goroutines the lock exists for.
		allreduce[float32](ctx, w, group{"world", w, seq(w.Size())})
		alltoallv[int32](ctx, w, group{"world", w, seq(w.Size())})
		sendRecv(ctx, w)
		concurrent(ctx, w)
	case "bench":
		rankBench(ctx, w)
	case "collective-timeout":
		rankCollectiveTimeout(ctx, w)
	case "timeout":
		rankTimeout(ctx, w)
	case "abort":
		rankAbort(ctx, w)
	}
	check(w, "Finalize", Finalize(ctx))
	fmt.Printf("RANK-OK %d\n", w.Rank())
}

func fail(w *Comm, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rank %d: %s\n", w.Rank(), fmt.Sprintf(format, args...))
	Abort(1)
}

func check(w *Comm, what string, err error) {
	if err != nil {
		fail(w, "%s: %v", what, err)
	}
}

func expectEqual[T comparable](w *Comm, what string, got, want []T) {
	if !slices.Equal(got, want) {
		fail(w, "%s: got %v, want %v", what, got, want)
	}
}

// group is one communicator made by Split, described by the world ranks in
// it (in its rank order), so the reference can say what each member sent.
type group struct {
	name    string
	comm    *Comm
	members []int
}

// splits builds several layouts: the world, halves with the key reversing
// the order, singletons, 3+1 uneven groups, and one leaving rank 0 out. The
// expected membership is computed from the same color and key rules.
func splits(ctx context.Context, w *Comm) []group {
	rules := []struct {
		name       string
		color, key func(r int) int
	}{
		{"halves", func(r int) int { return r % 2 }, func(r int) int { return -r }},
		{"singletons", func(r int) int { return r }, func(r int) int { return 0 }},
		{"3+1", func(r int) int { return min(r/3, 1) }, func(r int) int { return 0 }},
		{"without-0", func(r int) int {
			if r == 0 {
				return Undefined
			}
			return 7
		}, func(r int) int { return 0 }},
	}
	out := []group{{"world", w, seq(w.Size())}}
	me := w.Rank()
	for _, rule := range rules {
		c, err := w.Split(ctx, rule.color(me), rule.key(me))
		check(w, "Split "+rule.name, err)
		if rule.color(me) == Undefined {
			if c != nil {
				fail(w, "Split %s: Undefined color gave a communicator", rule.name)
			}
			continue
		}
		var members []int
		for r := range w.Size() {
			if rule.color(r) == rule.color(me) {
				members = append(members, r)
			}
		}
		slices.SortStableFunc(members, func(a, b int) int { return cmp.Compare(rule.key(a), rule.key(b)) })
		if c.Size() != len(members) || members[c.Rank()] != me {
			fail(w, "Split %s: rank %d of %d, want position of %d in %v", rule.name, c.Rank(), c.Size(), me, members)
		}
		out = append(out, group{rule.name, c, members})
	}
	return out
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// val is what world rank r contributes at index i: small integers, so that
// float sums are exact and the reference can be compared with ==.
func val[T Number](r, i int) T { return T((i*7+r*3)%11 + r) }

func rankCollectives(ctx context.Context, w *Comm) {
	// A nil dereference after Init must still be a Go panic (Open MPI's
	// signal handlers are kept out in Init).
	func() {
		defer func() { _ = recover() }()
		var p *int
		_ = *p
	}()
	if err := Send(ctx, w, []byte{1}, w.Size()+5, 0); err == nil {
		fail(w, "Send to a rank that does not exist succeeded")
	}
	for _, g := range splits(ctx, w) {
		allreduce[float32](ctx, w, g)
		allreduce[float64](ctx, w, g)
		allreduce[int32](ctx, w, g)
		allreduce[int64](ctx, w, g)
		allgatherv[float32](ctx, w, g)
		allgatherv[int64](ctx, w, g)
		allgatherv[uint16](ctx, w, g)
		allgatherv[byte](ctx, w, g)
		reduceScatter[float64](ctx, w, g, Sum)
		reduceScatter[int32](ctx, w, g, Sum)
		reduceScatter[float32](ctx, w, g, Max)
		alltoallv[float64](ctx, w, g)
		alltoallv[int32](ctx, w, g)
		alltoallv[uint16](ctx, w, g)
		bcast[float32](ctx, w, g)
		bcast[byte](ctx, w, g)
		reduce[float32](ctx, w, g)
		reduce[int64](ctx, w, g)
		check(w, g.name+" Barrier", g.comm.Barrier(ctx))
		if g.comm != w {
			check(w, g.name+" Free", g.comm.Free())
		}
	}
	sendRecv(ctx, w)
	concurrent(ctx, w)
}

// concurrent runs collectives on two communicators from two goroutines at
// once: legal under MPI_THREAD_MULTIPLE, and serialised by the package's
// lock under SERIALIZED.
func concurrent(ctx context.Context, w *Comm) {
	var comms [2]*Comm
	for i := range comms {
		c, err := w.Split(ctx, 0, w.Rank())
		check(w, "Split copy", err)
		comms[i] = c
	}
	errs := make(chan error, len(comms))
	for i, c := range comms {
		go func() {
			for k := range 20 {
				buf := []int64{int64(w.Rank() + i + k)}
				if err := Allreduce(ctx, c, nil, buf, Sum); err != nil {
					errs <- err
					return
				}
				n := int64(w.Size())
				if want := n*(n-1)/2 + n*int64(i+k); buf[0] != want {
					errs <- fmt.Errorf("comm %d round %d: %d, want %d", i, k, buf[0], want)
					return
				}
			}
			errs <- nil
		}()
	}
	for range comms {
		check(w, "concurrent Allreduce", <-errs)
	}
	for _, c := range comms {
		check(w, "Free copy", c.Free())
	}
}

func allreduce[T Number](ctx context.Context, w *Comm, g group) {
	const n = 37
	for _, op := range []Op{Sum, Max} {
		want := make([]T, n)
		for i := range want {
			for j, r := range g.members {
				v := val[T](r, i)
				if op == Sum {
					want[i] += v
				} else if j == 0 || v > want[i] {
					want[i] = v
				}
			}
		}
		in := make([]T, n)
		for i := range in {
			in[i] = val[T](w.Rank(), i)
		}
		out := make([]T, n)
		what := fmt.Sprintf("%s Allreduce %T op %d", g.name, in[0], op)
		check(w, what, Allreduce(ctx, g.comm, in, out, op))
		expectEqual(w, what, out, want)
		check(w, what+" in place", Allreduce(ctx, g.comm, nil, in, op))
		expectEqual(w, what+" in place", in, want)
	}
}

// reduce sums onto each member in turn as the root: only the root's recv
// is written, and it holds the sum.
func reduce[T Number](ctx context.Context, w *Comm, g group) {
	const n = 23
	for root := range g.comm.Size() {
		want := make([]T, n)
		for i := range want {
			for _, r := range g.members {
				want[i] += val[T](r, i)
			}
		}
		in := make([]T, n)
		for i := range in {
			in[i] = val[T](w.Rank(), i)
		}
		var out []T
		if g.comm.Rank() == root {
			out = make([]T, n)
		}
		what := fmt.Sprintf("%s Reduce %T root %d", g.name, in[0], root)
		check(w, what, Reduce(ctx, g.comm, in, out, Sum, root))
		if g.comm.Rank() == root {
			expectEqual(w, what, out, want)
		}
	}
	if err := Reduce(ctx, g.comm, []T{1}, nil, Sum, g.comm.Size()); err == nil {
		fail(w, "%s Reduce to a root outside the communicator succeeded", g.name)
	}
}

// count is how many elements world rank r contributes: uneven, one zero.
func count(r int) int { return []int{3, 0, 5, 1, 2, 4}[r%6] }

func counts(g group) []int {
	c := make([]int, len(g.members))
	for i, r := range g.members {
		c[i] = count(r)
	}
	return c
}

func allgatherv[T Elem](ctx context.Context, w *Comm, g group) {
	var want []T
	for _, r := range g.members {
		for i := range count(r) {
			want = append(want, T(100*r+i))
		}
	}
	send := want[:0:0]
	for i := range count(w.Rank()) {
		send = append(send, T(100*w.Rank()+i))
	}
	recv := make([]T, len(want))
	what := fmt.Sprintf("%s Allgatherv %T", g.name, recv)
	check(w, what, Allgatherv(ctx, g.comm, send, recv, counts(g)))
	expectEqual(w, what, recv, want)

	// In place: this rank's block already sits in recv; the rest is junk.
	off := 0
	for _, r := range g.members[:g.comm.Rank()] {
		off += count(r)
	}
	for i := range recv {
		recv[i] = 99
	}
	copy(recv[off:], send)
	check(w, what+" in place", Allgatherv(ctx, g.comm, recv[off:off+len(send)], recv, counts(g)))
	expectEqual(w, what+" in place", recv, want)
}

func reduceScatter[T Number](ctx context.Context, w *Comm, g group, op Op) {
	cnt := counts(g)
	total := 0
	for _, c := range cnt {
		total += c
	}
	full := make([]T, total) // the reduction of every member's send
	for i := range full {
		for j, r := range g.members {
			v := val[T](r, i)
			if op == Sum {
				full[i] += v
			} else if j == 0 || v > full[i] {
				full[i] = v
			}
		}
	}
	send := make([]T, total)
	for i := range send {
		send[i] = val[T](w.Rank(), i)
	}
	off := 0
	for _, c := range cnt[:g.comm.Rank()] {
		off += c
	}
	recv := make([]T, cnt[g.comm.Rank()])
	what := fmt.Sprintf("%s ReduceScatter %T op %d", g.name, recv, op)
	check(w, what, ReduceScatter(ctx, g.comm, send, recv, cnt, op))
	expectEqual(w, what, recv, full[off:off+len(recv)])
}

// a2a is how many elements world rank a sends world rank b, and what.
func a2aCount(a, b int) int        { return (a + 2*b) % 4 }
func a2aVal[T Elem](a, b, k int) T { return T(64*a + 8*b + k) }

func alltoallv[T Elem](ctx context.Context, w *Comm, g group) {
	me := w.Rank()
	var send, want []T
	sc, rc := make([]int, len(g.members)), make([]int, len(g.members))
	for i, r := range g.members {
		sc[i], rc[i] = a2aCount(me, r), a2aCount(r, me)
		for k := range sc[i] {
			send = append(send, a2aVal[T](me, r, k))
		}
		for k := range rc[i] {
			want = append(want, a2aVal[T](r, me, k))
		}
	}
	recv := make([]T, len(want))
	what := fmt.Sprintf("%s Alltoallv %T", g.name, recv)
	check(w, what, Alltoallv(ctx, g.comm, send, sc, recv, rc))
	expectEqual(w, what, recv, want)
}

func bcast[T Elem](ctx context.Context, w *Comm, g group) {
	root := g.comm.Size() - 1
	want := make([]T, 19)
	for i := range want {
		want[i] = T(3*i + g.members[root])
	}
	buf := make([]T, len(want))
	if g.comm.Rank() == root {
		copy(buf, want)
	}
	what := fmt.Sprintf("%s Bcast %T", g.name, buf)
	check(w, what, Bcast(ctx, g.comm, buf, root))
	expectEqual(w, what, buf, want)
}

// sendRecv passes messages round a ring with two tags, received in the
// opposite order to the sends, then once more with wildcards and a buffer
// longer than the message.
func sendRecv(ctx context.Context, w *Comm) {
	n, me := w.Size(), w.Rank()
	next, prev := (me+1)%n, (me+n-1)%n
	sent := make(chan error, 1)
	go func() {
		err := Send(ctx, w, []float64{float64(me), 5}, next, 5)
		if err == nil {
			err = Send(ctx, w, []float64{float64(me), 9, 9}, next, 9)
		}
		if err == nil {
			err = Send(ctx, w, []int32{int32(me)}, next, 11)
		}
		sent <- err
	}()
	buf := make([]float64, 3)
	st, err := Recv(ctx, w, buf, prev, 9)
	check(w, "Recv tag 9", err)
	if st.Source != prev || st.Tag != 9 || st.Count != 3 || buf[0] != float64(prev) || buf[1] != 9 {
		fail(w, "Recv tag 9: status %+v buf %v", st, buf)
	}
	st, err = Recv(ctx, w, buf, prev, 5)
	check(w, "Recv tag 5", err)
	if st.Source != prev || st.Tag != 5 || st.Count != 2 || buf[0] != float64(prev) || buf[1] != 5 {
		fail(w, "Recv tag 5: status %+v buf %v", st, buf)
	}
	ibuf := make([]int32, 4)
	st, err = Recv(ctx, w, ibuf, AnySource, AnyTag)
	check(w, "Recv any", err)
	if st.Source != prev || st.Tag != 11 || st.Count != 1 || ibuf[0] != int32(prev) {
		fail(w, "Recv any: status %+v buf %v", st, ibuf)
	}
	check(w, "Send", <-sent)

	// A message longer than the buffer is MPI's error (MPI_ERR_TRUNCATE),
	// and comes back as an *Error instead of aborting inside MPI.
	go func() { sent <- Send(ctx, w, []int32{1, 2, 3}, next, 13) }()
	_, err = Recv(ctx, w, make([]int32, 1), prev, 13)
	var merr *Error
	if !errors.As(err, &merr) || merr.Code == 0 || merr.Msg == "" {
		fail(w, "Recv of 3 elements into 1: %v", err)
	}
	check(w, "Send 3", <-sent)
	if strings.Contains(err.Error(), "\n") {
		fail(w, "MPI error on several lines: %q", err)
	}
}

// rankTimeout: rank 0 waits for a message rank 1 never sends, and must get
// a TimeoutError naming Recv; then both finish normally.
func rankTimeout(ctx context.Context, w *Comm) {
	if w.Rank() == 0 {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		_, err := Recv(short, w, make([]float32, 4), 1, 7)
		var te *TimeoutError
		if !errors.As(err, &te) || te.Op != "Recv" || !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 5*time.Second {
			fail(w, "Recv from a silent peer: %v after %v", err, time.Since(t0))
		}
		abandonMu.Lock()
		left := len(abandoned)
		abandonMu.Unlock()
		if left != 0 {
			fail(w, "the timed-out Recv was not cancelled (%d requests abandoned)", left)
		}
		fmt.Println("TIMEOUT-OK:", err)
	}
	check(w, "Barrier", w.Barrier(ctx))
}

// rankAbort: rank 1 aborts; the others wait in Recv for 20 s, longer than
// the parent test allows, so only the launcher's ending them passes.
func rankAbort(ctx context.Context, w *Comm) {
	check(w, "Barrier", w.Barrier(ctx))
	if w.Rank() == 1 {
		Abort(3)
	}
	_, err := Recv(ctx, w, make([]byte, 1), 1, 0)
	fail(w, "still running after rank 1 aborted (Recv: %v)", err)
}

// rankCollectiveTimeout: rank 0 never joins an Allreduce; the others time
// out naming it, and abort the job as a caller would.
func rankCollectiveTimeout(ctx context.Context, w *Comm) {
	check(w, "Barrier", w.Barrier(ctx))
	if w.Rank() == 0 {
		_, err := Recv(ctx, w, make([]byte, 1), 1, 0)
		fail(w, "still running after the others aborted (Recv: %v)", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err := Allreduce(short, w, nil, []float32{1, 2}, Sum)
	var te *TimeoutError
	if !errors.As(err, &te) || te.Op != "Allreduce" {
		fail(w, "Allreduce without rank 0: %v", err)
	}
	fmt.Fprintf(os.Stderr, "rank %d: %v\n", w.Rank(), err)
	Abort(4)
}
