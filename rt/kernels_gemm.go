package rt

import (
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt/vecmath"
)

// gemmOp is one matmul's GEMM shape: C (m×n) = op(A) (m×k) · op(B) (k×n),
// row-major, with op(X) = Xᵀ where the flag says the operand is stored
// transposed (lower's gemm fusion). run does one batch element.
type gemmOp struct {
	bl      BLAS
	ta, tb  bool
	m, n, k int
	pool    *hostPool // scratch for a BLAS that cannot read transposed
}

// run multiplies the blocks of a, b at element offsets ao, bo into out at
// co (f32 or f64). A transposed A is stored k×m (leading dim m), a
// transposed B n×k (leading dim k).
func (g *gemmOp) run(a *Tensor, ao int, b *Tensor, bo int, out *Tensor, co int) {
	lda, ldb := g.k, g.n
	if g.ta {
		lda = g.m
	}
	if g.tb {
		ldb = g.k
	}
	switch od := out.Data.(type) {
	case []float32:
		ad, bd := a.Data.([]float32)[ao:], b.Data.([]float32)[bo:]
		if !g.ta && !g.tb {
			g.bl.Sgemm(g.m, g.n, g.k, ad, lda, bd, ldb, od[co:], g.n)
			return
		}
		if t, ok := g.bl.(TransBLAS); ok {
			t.SgemmT(g.ta, g.tb, g.m, g.n, g.k, ad, lda, bd, ldb, od[co:], g.n)
			return
		}
		// no transposed reads: the operand transposed into scratch first
		if g.ta {
			s := g.scratch32(g.m * g.k)
			vecmath.Transpose(s, ad, g.k, g.m)
			defer g.pool.putData(ir.F32, len(s), s, true)
			ad = s
		}
		if g.tb {
			s := g.scratch32(g.k * g.n)
			vecmath.Transpose(s, bd, g.n, g.k)
			defer g.pool.putData(ir.F32, len(s), s, true)
			bd = s
		}
		g.bl.Sgemm(g.m, g.n, g.k, ad, g.k, bd, g.n, od[co:], g.n)
	case []float64:
		ad, bd := a.Data.([]float64)[ao:], b.Data.([]float64)[bo:]
		if !g.ta && !g.tb {
			g.bl.Dgemm(g.m, g.n, g.k, ad, lda, bd, ldb, od[co:], g.n)
			return
		}
		if t, ok := g.bl.(TransBLAS); ok {
			t.DgemmT(g.ta, g.tb, g.m, g.n, g.k, ad, lda, bd, ldb, od[co:], g.n)
			return
		}
		if g.ta {
			s := g.pool.f64(g.m * g.k)
			transposeBlocks(s, ad[:g.m*g.k], g.k, g.m)
			defer g.pool.done(s)
			ad = s
		}
		if g.tb {
			s := g.pool.f64(g.k * g.n)
			transposeBlocks(s, bd[:g.k*g.n], g.n, g.k)
			defer g.pool.done(s)
			bd = s
		}
		g.bl.Dgemm(g.m, g.n, g.k, ad, g.k, bd, g.n, od[co:], g.n)
	}
}

// scratch32 is an f32 working buffer of n elements (contents unspecified)
// from the pool's scratch lists, outside the plan's accounting as the
// kernels' f64 scratch is; give it back with putData(..., true).
func (g *gemmOp) scratch32(n int) []float32 {
	if d := g.pool.take(ir.F32, n, true); d != nil {
		return d.([]float32)
	}
	return make([]float32, n)
}
