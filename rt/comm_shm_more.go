package rt

// The shared-memory all-to-all, broadcast and reduce (see comm_shm.go).

import (
	"context"
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
)

// shmAllToAll: member r copies piece r of every member's input (cut along
// splitDim) into its result, member m's at m's place along catDim.
func (g *Ring) shmAllToAll(ctx context.Context, t *Tensor, splitDim int, lens []int, catDim int, catLens []int) (Buffer, error) {
	start := g.began()
	p := g.Size()
	if err := g.checkLens(t.Shape, splitDim, lens); err != nil {
		return nil, fmt.Errorf("all_to_all: %v", err)
	}
	if catDim < 0 || catDim >= len(t.Shape) || len(lens) != p || len(catLens) != p {
		return nil, fmt.Errorf("all_to_all: cat dim %d, %d and %d lengths for a %d-dim block in a group of %d", catDim, len(lens), len(catLens), len(t.Shape), p)
	}
	shape := slices.Clone(t.Shape)
	shape[splitDim] = lens[g.Rank]
	pieceLen := func(m int) int { // member m's piece's length along catDim
		if catDim == splitDim {
			return lens[g.Rank]
		}
		return catLens[m]
	}
	shape[catDim] = 0
	for m := range p {
		shape[catDim] += pieceLen(m)
	}
	if err := g.meet(ctx, call{kind: "all_to_all", arg: splitDim<<8 | catDim}, t, nil); err != nil {
		return nil, err
	}
	s := g.posted()
	var out *Tensor
	err := g.checkPieces(splitDim, catDim, pieceLen)
	if err == nil {
		out = g.result(t.DType, shape)
		soff, doff := make([]int, len(shape)), make([]int, len(shape))
		for _, l := range lens[:g.Rank] {
			soff[splitDim] += l
		}
		for m, x := range s.in {
			count := slices.Clone(x.Shape)
			count[splitDim] = lens[g.Rank]
			CopyBlock(out, doff, x, soff, count)
			doff[catDim] += pieceLen(m)
		}
		// the pairwise exchange sends every piece but this member's own
		outer, inner := around(t.Shape, splitDim)
		g.sendBytes(int64((t.Shape[splitDim]-lens[g.Rank])*outer*inner) * int64(t.DType.Size()))
	}
	return g.finish(ctx, start, out, err)
}

// checkPieces checks every member's all-to-all input against this
// member's (piecesAgree).
func (g *Ring) checkPieces(splitDim, catDim int, pieceLen func(int) int) error {
	return piecesAgree(g.posted().in, g.Rank, splitDim, catDim, pieceLen)
}

// piecesAgree checks every member's all-to-all input against member me's:
// same dtype, same rank, the same split length, and along catDim the
// length me expects of that member's piece.
func piecesAgree[B Buffer](in []B, me, splitDim, catDim int, pieceLen func(int) int) error {
	mine := in[me]
	for m, x := range in {
		shape, own := x.Dims(), mine.Dims()
		ok := x.Elem() == mine.Elem() && len(shape) == len(own)
		for d := 0; ok && d < len(shape); d++ {
			ok = d == catDim && d != splitDim || shape[d] == own[d]
		}
		if ok && catDim != splitDim && shape[catDim] != pieceLen(m) {
			return fmt.Errorf("all_to_all: member %d's piece has length %d along dim %d, expected %d", m, shape[catDim], catDim, pieceLen(m))
		}
		if !ok {
			return fmt.Errorf("all_to_all: member %d holds %s%v, member %d %s%v", m, x.Elem(), shape, me, mine.Elem(), own)
		}
	}
	return nil
}

// shmBroadcast: the root copies its tensor into the group's one result
// (shared), which every member then holds. (The ring hands peers the
// root's own buffer, which the root's arena may recycle; one copy per
// group avoids that.) The bytes counted are the binomial tree's: a member
// sends the whole tensor once per child.
func (g *Ring) shmBroadcast(ctx context.Context, t *Tensor, root int, dt ir.DType, shape []int) (Buffer, error) {
	start := g.began()
	p := g.Size()
	if root < 0 || root >= p {
		return nil, fmt.Errorf("broadcast: root %d in a group of %d", root, p)
	}
	if g.isSmall(int64(numel(shape) * dt.Size())) {
		return g.smallBroadcast(ctx, t, root, dt, shape)
	}
	if g.Rank != root {
		t = nil
	}
	if err := g.meet(ctx, call{kind: "broadcast", arg: root}, t, g.shared(dt, shape)); err != nil {
		return nil, err
	}
	x, out, owner := g.posted().in[root], g.posted().out[0], g.posted().owner
	var err error
	if x == nil {
		err = fmt.Errorf("broadcast: the root has no tensor")
	} else if x.DType != dt || !sameShape(x.Shape, shape) {
		err = fmt.Errorf("broadcast: got %s%v from the root, expected %s%v", x.DType, x.Shape, dt, shape)
	} else {
		if g.Rank == root {
			copyRows(out, x, rows{count: 1, len: x.Numel()})
		}
		g.sendBytes(int64(treeChildren(mod(g.Rank-root, p), p)) * x.Bytes())
	}
	return g.finishShared(ctx, start, out, owner, shape, err)
}

// treeChildren is how many members virtual rank vr sends to in the
// binomial tree of Ring.Broadcast.
func treeChildren(vr, p int) int {
	mask := 1
	for mask < p && vr&mask == 0 {
		mask <<= 1
	}
	n := 0
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			n++
		}
	}
	return n
}

// shmReduce: the sum on root, zeros elsewhere. Every member computes its
// balanced slice of the root's result, adding the members' values in the
// binomial tree's order of Ring.Reduce (a member's value, then each
// child's subtree sum in turn), half precision in f32, rounded once. The
// bytes counted are the tree's: every member but the root sends its
// partial sum (in f32 for half precision) once.
func (g *Ring) shmReduce(ctx context.Context, t *Tensor, root int) (Buffer, error) {
	start := g.began()
	p, n := g.Size(), t.Numel()
	if root < 0 || root >= p {
		return nil, fmt.Errorf("reduce: root %d in a group of %d", root, p)
	}
	out := g.result(t.DType, t.Shape)
	if g.Rank != root {
		clearData(out.Data)
	}
	if err := g.meet(ctx, call{kind: "reduce", arg: root}, t, out); err != nil {
		return nil, err
	}
	err := g.sameInputs("reduce", func(shape []int) bool { return sameShape(shape, t.Shape) })
	if err == nil {
		lens := balanced(n, p)
		lo := 0
		for _, l := range lens[:g.Rank] {
			lo += l
		}
		err = g.treeReduce(g.posted().out[root], root, lo, lo+lens[g.Rank])
	}
	if err == nil && g.Rank != root {
		g.sendBytes(int64(n * wideDType(t.DType).Size()))
	}
	return g.finish(ctx, start, out, err)
}

// treeReduce writes elements [lo, hi) of the sum into out.
func (g *Ring) treeReduce(out *Tensor, root, lo, hi int) error {
	in, p := g.posted().in, g.Size()
	member := func(vr int) *Tensor { return in[(vr+root)%p] }
	switch d := out.Data.(type) {
	case []float32:
		treeTiles(p, lo, hi, func(vr, at int, dst []float32) { copy(dst, member(vr).Data.([]float32)[at:]) }, inPlace(d))
	case []float64:
		treeTiles(p, lo, hi, func(vr, at int, dst []float64) { copy(dst, member(vr).Data.([]float64)[at:]) }, inPlace(d))
	case []int32:
		treeTiles(p, lo, hi, func(vr, at int, dst []int32) { copy(dst, member(vr).Data.([]int32)[at:]) }, inPlace(d))
	case []int64:
		treeTiles(p, lo, hi, func(vr, at int, dst []int64) { copy(dst, member(vr).Data.([]int64)[at:]) }, inPlace(d))
	case []uint16:
		to, from := BF16ToF32, F32ToBF16
		if out.DType == ir.F16 {
			to, from = F16ToF32, F32ToF16
		}
		load := func(vr, at int, dst []float32) {
			for i, h := range member(vr).Data.([]uint16)[at : at+len(dst)] {
				dst[i] = to(h)
			}
		}
		wide := make([]float32, reduceTile)
		treeTiles(p, lo, hi, load, func(at, w int, acc []float32) []float32 {
			if acc != nil { // a finished tile: round it once
				for i, f := range acc {
					d[at+i] = from(f)
				}
			}
			return wide[:w]
		})
	default:
		return fmt.Errorf("reduce: %s is not supported", out.DType)
	}
	return nil
}

// inPlace is the tile function of a result summed in its own type: the tile
// is the result itself.
func inPlace[W Num](d []W) func(at, w int, done []W) []W {
	return func(at, w int, done []W) []W { return d[at : at+w] }
}

// reduceTile is the elements a reduce sums at a time (a few of them are
// alive at once, one per level of the tree).
const reduceTile = 1024

// treeTiles sums elements [lo, hi) of the members' values a tile at a
// time: tile gives the accumulator of the tile at at (w elements), and
// is called again with the finished accumulator (a widened result
// rounds it there).
func treeTiles[W Num](p, lo, hi int, load func(vr, at int, dst []W), tile func(at, w int, done []W) []W) {
	depth := 1
	for 1<<depth < p {
		depth++
	}
	scratch := make([][]W, depth+1)
	for i := range scratch {
		scratch[i] = make([]W, min(reduceTile, hi-lo))
	}
	for at := lo; at < hi; at += reduceTile {
		w := min(reduceTile, hi-at)
		a := tile(at, w, nil)
		treeSum(a, 0, p, p, func(vr int, dst []W) { load(vr, at, dst) }, scratch)
		tile(at, w, a)
	}
}

// treeSum is what virtual rank u of Ring.Reduce's binomial tree holds
// when it passes its sum on: its own value, plus the sum of each child
// u+1, u+2, u+4, … below its lowest set bit m, in that order.
func treeSum[W Num](acc []W, u, m, p int, load func(vr int, dst []W), scratch [][]W) {
	load(u, acc)
	for mask := 1; mask < m && u+mask < p; mask <<= 1 {
		child := scratch[0][:len(acc)]
		treeSum(child, u+mask, mask, p, load, scratch[1:])
		for i, v := range child {
			acc[i] += v
		}
	}
}
