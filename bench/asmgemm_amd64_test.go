package bench

import (
	"os"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/rt/asmgemm"
)

// BenchmarkAsmGEMMVsOpenBLAS times rt/asmgemm's SGEMM (our micro-kernel
// in Go assembly: AVX-512 where the CPU has it, else AVX2/FMA;
// ASM_KERNEL=avx2 picks the AVX2 one) against the default BLAS (OpenBLAS where
// installed; its threads as meshrun sets them: run with GOMAXPROCS=1 for
// one thread each) and gonum's, on matmul shapes of the examples and two
// larger ones, and three with A stored transposed ("Atrans": a weight
// gradient's GEMM), the three calls rotating order every iteration. It
// reports asm/BLAS and asm/gonum throughput per iteration, min / median /
// max (issue 10: can our own kernel reach 0.7× OpenBLAS?). -benchtime
// 200x.
func BenchmarkAsmGEMMVsOpenBLAS(b *testing.B) {
	kn := asmgemm.AVX512
	if !kn.Supported() || os.Getenv("ASM_KERNEL") == "avx2" {
		kn = asmgemm.AVX2
	}
	if !kn.Supported() {
		b.Skip("no AVX2/FMA")
	}
	ref := rt.DefaultBLAS()
	for _, c := range []struct {
		sh [3]int
		ta bool // A stored transposed (k×m), as a weight gradient's GEMM reads it
	}{
		{sh: [3]int{256, 32, 128}}, {sh: [3]int{256, 128, 32}}, {sh: [3]int{256, 32, 32}},
		{sh: [3]int{256, 512, 1024}}, {sh: [3]int{256, 1024, 512}}, {sh: [3]int{64, 512, 512}},
		{sh: [3]int{32, 512, 2048}}, {sh: [3]int{512, 512, 512}}, {sh: [3]int{1024, 1024, 1024}},
		{sh: [3]int{32, 256, 128}, ta: true}, {sh: [3]int{128, 256, 32}, ta: true}, {sh: [3]int{512, 256, 512}, ta: true},
	} {
		sh, ta := c.sh, c.ta
		m, k, n := sh[0], sh[1], sh[2]
		name := ir.ShapeString(sh[:])
		if ta {
			name += "Atrans"
		}
		b.Run(name, func(b *testing.B) {
			x, w := make([]float32, m*k), make([]float32, k*n)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			for i := range w {
				w[i] = float32(i%5) - 2
			}
			c := make([]float32, m*n)
			lda := k
			if ta {
				lda = m
			}
			calls := []func(){
				func() { kn.SgemmT(ta, false, m, n, k, x, lda, w, n, c, n) },
				func() { ref.(rt.TransBLAS).SgemmT(ta, false, m, n, k, x, lda, w, n, c, n) },
				func() { rt.GonumBLAS{}.SgemmT(ta, false, m, n, k, x, lda, w, n, c, n) },
			}
			var total [3]time.Duration
			var vsRef, vsGonum []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var d [3]time.Duration
				for j := range calls {
					at := (i + j) % 3
					t0 := time.Now()
					calls[at]()
					d[at] = time.Since(t0)
				}
				for j := range d {
					total[j] += d[j]
				}
				vsRef = append(vsRef, float64(d[1])/float64(d[0]))
				vsGonum = append(vsGonum, float64(d[2])/float64(d[0]))
			}
			lo, med, hi := spread(vsRef)
			glo, gmed, ghi := spread(vsGonum)
			gf := func(d time.Duration) float64 { return 2 * float64(m*n*k) * float64(b.N) / d.Seconds() / 1e9 }
			b.ReportMetric(med, "asm/blas")
			b.Logf("%s: asm (%s) %.1f GF/s, %s %.1f GF/s, gonum %.1f GF/s; asm/BLAS throughput min %.2f median %.2f max %.2f; asm/gonum min %.2f median %.2f max %.2f (%d iterations)",
				name, kn.Name, gf(total[0]), rt.DescribeBLAS(ref), gf(total[1]), gf(total[2]), lo, med, hi, glo, gmed, ghi, b.N)
		})
	}
}
