package rt

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/meshrun/meshrun/internal/size"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
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
// transposed B n×k (leading dim k). It has no defer (a function whose
// defers cannot be open-coded pays the runtime's defer walk on every
// return: 10% of a small matmul's fixed cost, issue 10 goal 5); a BLAS
// that cannot read transposed goes through run32T and run64T.
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
		} else if t, ok := g.bl.(TransBLAS); ok {
			t.SgemmT(g.ta, g.tb, g.m, g.n, g.k, ad, lda, bd, ldb, od[co:], g.n)
		} else {
			g.run32T(ad, bd, od[co:])
		}
	case []float64:
		ad, bd := a.Data.([]float64)[ao:], b.Data.([]float64)[bo:]
		if !g.ta && !g.tb {
			g.bl.Dgemm(g.m, g.n, g.k, ad, lda, bd, ldb, od[co:], g.n)
		} else if t, ok := g.bl.(TransBLAS); ok {
			t.DgemmT(g.ta, g.tb, g.m, g.n, g.k, ad, lda, bd, ldb, od[co:], g.n)
		} else {
			g.run64T(ad, bd, od[co:])
		}
	}
}

// run32T is run for f32 on a BLAS without transposed reads: each
// transposed operand copied transposed into scratch first.
func (g *gemmOp) run32T(ad, bd, od []float32) {
	if g.ta {
		s := g.scratch32(g.m * g.k)
		vecmath.Transpose(s, ad, g.k, g.m)
		defer putScratch(g.pool, s)
		ad = s
	}
	if g.tb {
		s := g.scratch32(g.k * g.n)
		vecmath.Transpose(s, bd, g.n, g.k)
		defer putScratch(g.pool, s)
		bd = s
	}
	g.bl.Sgemm(g.m, g.n, g.k, ad, g.k, bd, g.n, od, g.n)
}

// run64T is run32T for f64.
func (g *gemmOp) run64T(ad, bd, od []float64) {
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
	g.bl.Dgemm(g.m, g.n, g.k, ad, g.k, bd, g.n, od, g.n)
}

// scratch32 is an f32 working buffer of n elements (contents unspecified)
// from the pool's scratch lists, outside the plan's accounting as the
// kernels' f64 scratch is; give it back with putScratch.
func (g *gemmOp) scratch32(n int) []float32 {
	if s := takeScratch[float32](g.pool, n); s != nil {
		return s
	}
	return make([]float32, n)
}

// matmul multiplies the last two dims, batch dims broadcast NumPy-style
// (the checker only admits equal or missing batch dims). ta and tb say an
// operand is stored transposed (its last two dims swapped: lower's gemm
// fusion, plan.Kernel.TransA and TransB); the GEMM reads it so through
// its flags instead of a copy. When B has no batch dims and A is not
// transposed, A's batch folds into its rows and one GEMM does all of it.
// The output is not zeroed first: GEMM with beta = 0 writes every
// element, and clearing it before cost as much as a small GEMM itself
// (issue 10, goal 5).
func (c *CPU) matmul(p *hostPool, a, b *Tensor, ta, tb bool) (*Tensor, error) {
	ra, rb := len(a.Shape), len(b.Shape)
	if ra < 2 || rb < 2 {
		return nil, fmt.Errorf("matmul of %s and %s: both need two dims", ir.ShapeString(a.Shape), ir.ShapeString(b.Shape))
	}
	m, k := a.Shape[ra-2], a.Shape[ra-1]
	if ta {
		m, k = k, m
	}
	kb, n := b.Shape[rb-2], b.Shape[rb-1]
	if tb {
		kb, n = n, kb
	}
	if kb != k {
		return nil, fmt.Errorf("local inner dims differ: %s%s @ %s%s", ir.ShapeString(a.Shape), tick(ta), ir.ShapeString(b.Shape), tick(tb))
	}
	ab, bb := a.Shape[:ra-2], b.Shape[:rb-2]
	batch, ok := matmulBatch(ab, bb)
	if !ok {
		return nil, fmt.Errorf("local batch dims differ: %s @ %s", ir.ShapeString(a.Shape), ir.ShapeString(b.Shape))
	}
	// shape stays on this stack (gemmCount counts it, not numel, whose
	// error path keeps its argument; the pool keeps copies): a matmul
	// allocates its output's header and nothing else (issue 10, goal 5)
	var dims [6]int
	shape := append(append(dims[:0], batch...), m, n)
	nb := numel(batch)
	if m == 0 || n == 0 || nb == 0 || k == 0 {
		return p.zeroed(a.DType, slices.Clone(shape)), nil
	}
	count, err := gemmCount(nb, m, n)
	if err != nil {
		return nil, fmt.Errorf("matmul of %s%s and %s%s: %w", ir.ShapeString(a.Shape), tick(ta), ir.ShapeString(b.Shape), tick(tb), err)
	}
	out := uninitialisedN(p, a.DType, shape, count)
	g := gemmOp{bl: c.BLAS, ta: ta, tb: tb, m: m, n: n, k: k, pool: p}
	if rb == 2 && !ta { // fold A's batch into rows: one GEMM
		g.m = m * numel(ab)
		g.run(a, 0, b, 0, out, 0)
		return out, nil
	}
	if own(ab, batch) && own(bb, batch) {
		// each operand has the batch dims or none (all the checker
		// admits): batch i is block i or 0 of each, with no index walk
		// and no stride slices to allocate
		as, bs := min(len(ab), 1), min(len(bb), 1)
		for i := 0; i < nb; i++ {
			g.run(a, i*as*m*k, b, i*bs*k*n, out, i*m*n)
		}
		return out, nil
	}
	as, bs := broadcastStrides(ab, batch), broadcastStrides(bb, batch)
	var idxs [4]int
	idx := idxs[:0]
	if len(batch) > len(idxs) {
		idx = make([]int, len(batch))
	} else {
		idx = idxs[:len(batch)]
	}
	for i := 0; i < nb; i++ {
		ao, bo := 0, 0
		for d := range idx {
			ao += idx[d] * as[d]
			bo += idx[d] * bs[d]
		}
		g.run(a, ao*m*k, b, bo*k*n, out, i*m*n)
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < batch[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out, nil
}

// tick marks a transposed operand in an error.
func tick(t bool) string {
	if t {
		return "ᵀ"
	}
	return ""
}

// matmulBatch is the batch dims of a matmul whose operands have batch dims
// ab and bb: one operand's own when the other has none or the same ones
// (all the checker admits; no allocation), else their NumPy broadcast.
func matmulBatch(ab, bb []int) ([]int, bool) {
	switch {
	case len(bb) == 0 || slices.Equal(ab, bb):
		return ab, true
	case len(ab) == 0:
		return bb, true
	}
	return ops.Broadcast(ab, bb)
}

// own: an operand's batch dims ob are the matmul's, or it has none.
func own(ob, batch []int) bool { return len(ob) == 0 || slices.Equal(ob, batch) }

// gemmCount is the element count of nb batches of m×n outputs, or an
// error past size.MaxElements: operands of valid sizes can still ask for
// an output no tensor may have ([2^21, 1] @ [1, 2^21]).
func gemmCount(nb, m, n int) (int, error) {
	hi, mn := bits.Mul64(uint64(m), uint64(n))
	hi2, all := bits.Mul64(mn, uint64(nb))
	if hi != 0 || hi2 != 0 || all > size.MaxElements {
		return 0, fmt.Errorf("an output of %d×%d×%d elements is past the limit of %d", nb, m, n, int64(size.MaxElements))
	}
	return int(all), nil
}
