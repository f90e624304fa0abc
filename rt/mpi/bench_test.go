package mpi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBench times Allreduce under each launcher; it runs only with
// MESHRUN_MPI_BENCH=1 (e.g. MESHRUN_MPI_BENCH=1 go test -run TestBench -v
// ./rt/mpi); MESHRUN_MPI_BENCH_NP sets the number of ranks (default 4).
func TestBench(t *testing.T) {
	if os.Getenv("MESHRUN_MPI_BENCH") == "" || os.Getenv("MESHRUN_MPI_TEST_MODE") != "" {
		t.Skip("set MESHRUN_MPI_BENCH=1 to time Allreduce under the launchers")
	}
	if err := Load(); err != nil {
		t.Skipf("no MPI library: %v", err)
	}
	for _, l := range launchers {
		if _, err := exec.LookPath(l.name); err != nil {
			t.Logf("%s: not found", l.name)
			continue
		}
		np := 4
		if n, err := strconv.Atoi(os.Getenv("MESHRUN_MPI_BENCH_NP")); err == nil && n > 0 {
			np = n
		}
		out, err, _ := launch(t, l, np, "bench", 120*time.Second)
		if err != nil {
			t.Fatalf("%s: %v\n%s", l.name, err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "BENCH") {
				t.Logf("%s: %s", l.name, line)
			}
		}
	}
}

// rankBench is the per-rank half of TestBench: in-place float32 Allreduce
// of growing sizes; rank 0 reports the mean time and the bus bandwidth
// (2(n-1)/n of the buffer per rank, the ring algorithm's traffic).
func rankBench(ctx context.Context, w *Comm) {
	for _, n := range []int{256, 16 << 10, 1 << 20} {
		buf := make([]float32, n)
		check(w, "warm-up", Allreduce(ctx, w, nil, buf, Sum))
		const iters = 20
		check(w, "Barrier", w.Barrier(ctx))
		t0 := time.Now()
		for range iters {
			check(w, "Allreduce", Allreduce(ctx, w, nil, buf, Sum))
		}
		dt := time.Since(t0) / iters
		if w.Rank() == 0 {
			bytes := float64(4 * n)
			bus := bytes * 2 * float64(w.Size()-1) / float64(w.Size()) / dt.Seconds() / 1e9
			fmt.Printf("BENCH Allreduce %8d B x %d ranks: %v  (%.2f GB/s bus)\n", 4*n, w.Size(), dt, bus)
		}
	}
}
