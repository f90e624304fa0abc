package rt

import (
	"math"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenBLASAgreesWithGonum runs where libopenblas.so.0 can be loaded;
// elsewhere it says why it skipped. MESHRUN_REQUIRE_OPENBLAS=1 turns the
// skip into a failure.
func TestOpenBLASAgreesWithGonum(t *testing.T) {
	ob, err := LoadOpenBLAS()
	if err != nil {
		if os.Getenv("MESHRUN_REQUIRE_OPENBLAS") == "1" {
			t.Fatalf("OpenBLAS required but not loadable: %v", err)
		}
		t.Skipf("OpenBLAS not available: %v", err)
	}
	for _, sh := range [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 33, 17}, {128, 128, 128}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b := make([]float64, m*k), make([]float64, k*n)
		for i := range a {
			a[i] = math.Sin(float64(i))
		}
		for i := range b {
			b[i] = math.Cos(float64(i))
		}
		c1, c2 := make([]float64, m*n), make([]float64, m*n)
		GonumBLAS{}.Dgemm(m, n, k, a, k, b, n, c1, n)
		ob.Dgemm(m, n, k, a, k, b, n, c2, n)
		for i := range c1 {
			require.InDelta(t, c1[i], c2[i], 1e-10*float64(k), "dgemm %v at %d", sh, i)
		}
		af, bf := make([]float32, m*k), make([]float32, k*n)
		for i := range af {
			af[i] = float32(a[i])
		}
		for i := range bf {
			bf[i] = float32(b[i])
		}
		s1, s2 := make([]float32, m*n), make([]float32, m*n)
		GonumBLAS{}.Sgemm(m, n, k, af, k, bf, n, s1, n)
		ob.Sgemm(m, n, k, af, k, bf, n, s2, n)
		for i := range s1 {
			require.InDelta(t, s1[i], s2[i], 1e-4*float64(k), "sgemm %v at %d", sh, i)
		}
	}
	require.Equal(t, "openblas", ob.Name())
}

func TestMatmulWithEmptyShards(t *testing.T) {
	cpu := &CPU{BLAS: GonumBLAS{}}
	for _, sh := range [][3]int{{0, 3, 4}, {3, 0, 4}, {3, 4, 0}} {
		a := NewTensor(2, []int{sh[0], sh[2]})
		b := NewTensor(2, []int{sh[2], sh[1]})
		out, err := cpu.matmul(nil, a, b, false, false)
		require.NoError(t, err)
		require.Equal(t, []int{sh[0], sh[1]}, out.Shape)
	}
}

// TestGEMMHeavyNoticeOnce: the missing-OpenBLAS notice comes once, after
// the operation count passes the limit, with the install command; not at
// all when OpenBLAS was declined.
func TestGEMMHeavyNoticeOnce(t *testing.T) {
	var buf strings.Builder
	old := BLASNotice
	BLASNotice = &buf
	defer func() { BLASNotice = old }()
	h := heavyCounter{limit: 1000, missing: func() (string, bool) { return "libopenblas.so.0 not found; OpenBLAS is faster: " + OpenBLASHint, true },
		using: func() string { return "gonum (pure Go, no BLAS library)" }}
	h.add(5, 5, 5) // 250
	require.Empty(t, buf.String())
	h.add(5, 10, 10) // 1250 in all
	require.Equal(t, "meshrun: this run is GEMM-heavy and runs on gonum (pure Go, no BLAS library): libopenblas.so.0 not found; OpenBLAS is faster: apt-get install libopenblas0-pthread\n", buf.String())
	h.add(50, 50, 50)
	require.Equal(t, 1, strings.Count(buf.String(), "meshrun:"))

	buf.Reset()
	declined := heavyCounter{limit: 1, missing: func() (string, bool) { return "", false }}
	declined.add(9, 9, 9)
	require.Empty(t, buf.String())
}

func TestCoreTypeFor(t *testing.T) {
	info := "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl\nflags\t: ignored\n"
	require.Equal(t, "SkylakeX", coreTypeFor(cpuFlags(info)))
	require.Equal(t, "Haswell", coreTypeFor(cpuFlags("flags : sse2 avx avx2 fma avx512f\n")))
	require.Equal(t, "", coreTypeFor(cpuFlags("flags : sse2 avx avx2\n")))
	require.Equal(t, "", coreTypeFor(cpuFlags("no flags here\n")))
}

// Many ranks call OpenBLAS at once (one goroutine per virtual device). A
// library built for 128 threads aborts the whole process ("too many memory
// regions") once more OS threads than that have entered it, which 256
// goroutines each blocked in their own cgo call used to cause. The calls
// must not each get an OS thread, and every result must be right.
func TestOpenBLASFromManyGoroutines(t *testing.T) {
	ob, err := LoadOpenBLAS()
	if err != nil {
		t.Skipf("OpenBLAS not available: %v", err)
	}
	const n, callers = 128, 256
	a, b := make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(math.Sin(float64(i))), float32(math.Cos(float64(i)))
	}
	want := make([]float32, n*n)
	GonumBLAS{}.Sgemm(n, n, n, a, n, b, n, want, n)
	bad := make([]int, callers)
	threads := pprof.Lookup("threadcreate").Count()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := make([]float32, n*n)
			for range 3 {
				ob.Sgemm(n, n, n, a, n, b, n, c, n)
				for i := range c {
					if math.Abs(float64(c[i]-want[i])) > 1e-4*n {
						bad[g]++
					}
				}
			}
		}()
	}
	wg.Wait()
	// at most 32 calls at once, and threads that left it are reused;
	// without the bound 256 callers made 220 threads here
	created := pprof.Lookup("threadcreate").Count() - threads
	require.LessOrEqual(t, created, 80, "OS threads created by %d goroutines calling OpenBLAS", callers)
	for g, k := range bad {
		require.Zero(t, k, "caller %d got %d wrong elements", g, k)
	}
}
