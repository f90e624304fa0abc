package ops

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
)

// Shape ops move data without arithmetic, so partial values pass through all
// of them. transpose: output dim i is input dim Perm[i], so S(Perm[i]) → S(i).
// concat and slice along Axis keep splits on every other dim. reshape keeps a
// split only where it provably maps to a split of the output (see reshapeSigs).

func init() {
	Register(Op{Name: "transpose", Family: "shape", Type: transposeOp, Placement: Rule{Sigs: transposeSigs}, Grad: transposeVJP,
		Doc: Doc{Rows: []Row{{"`transpose(a)` / `transpose(a, d0, d1)`", "swaps the last two dims / d0 and d1", ""},
			{"`permute(a, p0, p1, ...)`", "output dim i is input dim `p_i`", ""}},
			Examples: []Example{{"Y[n,m] = transpose(A[m,n])", OpDesc{In: [][]int{{4, 6}}, Out: []int{6, 4}, Perm: []int{1, 0}}}}}})
	Register(Op{Name: "reshape", Family: "shape", Type: reshapeOp, Placement: Rule{Sigs: reshapeSigs, NdOK: reshapeNdOK}, Grad: reshapeVJP,
		Doc: Doc{Rows: []Row{{"`reshape(a, d0, d1, ...)`", "same element count; one dim may be `-1`", "row-major"}},
			Examples: []Example{{"Y[a,b,n] = reshape(A[a·b,n], a, b, n)", OpDesc{In: [][]int{{8, 4}}, Out: []int{2, 4, 4}}}}}})
	Register(Op{Name: "concat", Family: "shape", Type: concatOp, Placement: Rule{Sigs: alongAxisSigs}, Grad: concatVJP,
		Doc: Doc{Rows: []Row{{"`concat(a, b, ..., axis=0)`", "equal dims except `axis`", ""}},
			Examples: []Example{{"Y[m1+m2,n] = concat(A[m1,n], B[m2,n], axis=0)", OpDesc{In: [][]int{{4, 4}, {2, 4}}, Out: []int{6, 4}, Axis: 0}}}}})
	Register(Op{Name: "slice", Family: "shape", Type: sliceOp, Placement: Rule{Sigs: alongAxisSigs}, Grad: sliceVJP,
		Doc: Doc{Rows: []Row{{"`slice(a, axis, start, end)`", "dim `axis` becomes `end-start`; `0 ≤ start < end ≤ n`", ""}},
			Examples: []Example{{"Y[m,j-i] = slice(A[m,n], 1, i, j)", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 2}, Axis: 1}}}}})
	RegisterCall("permute", permuteOp)
}

func transposeSigs(d *OpDesc) []Sig {
	var out []Sig
	for i, p := range d.Perm {
		out = append(out, Sig{In: []SBP{S(p)}, Out: S(i), Why: fmt.Sprintf("input dim %d becomes output dim %d", p, i)})
	}
	return append(out,
		Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"},
		Sig{In: []SBP{P}, Out: P, Why: "a permutation is linear"})
}

func alongAxisSigs(d *OpDesc) []Sig {
	n := len(d.In)
	var out []Sig
	for i := range d.Out {
		if i != d.Axis {
			out = append(out, Sig{In: repeat(S(i), n), Out: S(i), Why: fmt.Sprintf("split on dim %d, away from the %s dim, passes through", i, d.Op)})
		}
	}
	return append(out,
		Sig{In: repeat(B, n), Out: B, Why: "replicated in, replicated out"},
		Sig{In: repeat(P, n), Out: P, Why: d.Op + " is linear"})
}

// reshapeGroups pairs runs of input dims with runs of output dims whose
// sizes multiply to the same number. A run's first dim is its outermost.
type reshapeGroup struct{ in, out []int }

func reshapeGroups(in, out []int) []reshapeGroup {
	var gs []reshapeGroup
	i, j := 0, 0
	for i < len(in) && j < len(out) {
		g := reshapeGroup{in: []int{i}, out: []int{j}}
		pi, pj := in[i], out[j]
		i++
		j++
		for pi != pj {
			if pi < pj && i < len(in) {
				pi *= in[i]
				g.in = append(g.in, i)
				i++
			} else if pj < pi && j < len(out) {
				pj *= out[j]
				g.out = append(g.out, j)
				j++
			} else {
				return gs // sizes cannot match: no group is safe from here on
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// reshapeSigs: a split on the first dim of an input run maps to a split on
// the first dim of the matching output run. When the run is one dim of the
// same size on both sides any split is exact; otherwise the shard boundaries
// agree only if both first dims divide evenly by the devices splitting them,
// which reshapeNdOK checks for the whole mesh.
func reshapeSigs(d *OpDesc) []Sig {
	var out []Sig
	for _, g := range reshapeGroups(d.In[0], d.Out) {
		i, o, ok := leadingDims(g, d.In[0], d.Out)
		if !ok {
			continue
		}
		out = append(out, Sig{In: []SBP{S(i)}, Out: S(o), Why: fmt.Sprintf("the leading dim of a reshaped group (%d → %d) stays split", i, o)})
	}
	return append(out,
		Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"},
		Sig{In: []SBP{P}, Out: P, Why: "reshape is linear"})
}

// leadingDims finds a group's first input and output dims of size > 1:
// size-1 dims hold nothing to split, so a split of the first real dim maps
// to the first real dim on the other side.
func leadingDims(g reshapeGroup, in, out []int) (int, int, bool) {
	i, o := -1, -1
	for _, d := range g.in {
		if in[d] > 1 {
			i = d
			break
		}
	}
	for _, d := range g.out {
		if out[d] > 1 {
			o = d
			break
		}
	}
	return i, o, i >= 0 && o >= 0
}

// nonUnit counts the dims of size > 1 among dims.
func nonUnit(dims, shape []int) int {
	n := 0
	for _, d := range dims {
		if shape[d] > 1 {
			n++
		}
	}
	return n
}

func reshapeNdOK(d *OpDesc, m *mesh.Mesh, s NdSig) bool {
	in, out := d.In[0], d.Out
	for _, g := range reshapeGroups(in, out) {
		i, o, ok := leadingDims(g, in, out)
		if !ok {
			continue
		}
		exact := nonUnit(g.in, in) == 1 && nonUnit(g.out, out) == 1 && in[i] == out[o]
		p := 1
		for a, e := range s.In[0] {
			if e.IsS() && e.Dim == i {
				p *= m.Axes[a].Size
			}
		}
		if p > 1 && !exact && (in[i]%p != 0 || out[o]%p != 0) {
			return false
		}
	}
	return true
}

func transposeOp(b *Call) *ir.Value {
	if len(b.Args) != 1 && len(b.Args) != 3 {
		return b.Failf("transpose takes x, or x and two dims to swap")
	}
	x := b.Tensor(0, nil)
	if x == nil {
		return nil
	}
	r := x.Type.Rank()
	if r < 2 && len(b.Args) == 1 {
		return b.Failf("transpose(x) swaps the last two dims and needs rank >= 2, got %s", x.Type)
	}
	d0, d1 := r-2, r-1
	if len(b.Args) == 3 {
		var ok bool
		if d0, ok = b.axisAttr(1, "dim0", 0, r, true); !ok {
			return nil
		}
		if d1, ok = b.axisAttr(2, "dim1", 0, r, true); !ok {
			return nil
		}
	}
	perm := make([]int, r)
	for i := range perm {
		perm[i] = i
	}
	perm[d0], perm[d1] = perm[d1], perm[d0]
	return permuted(b, x, perm)
}

func permuted(b *Call, x *ir.Value, perm []int) *ir.Value {
	shape := make([]int, len(perm))
	for i, p := range perm {
		shape[i] = x.Type.Shape[p]
	}
	b.Name = "transpose"
	v := b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Perm = perm
	return v
}

func permuteOp(b *Call) *ir.Value {
	if len(b.Args) < 1 {
		return b.Failf("permute takes x and a permutation of its dims")
	}
	x := b.Tensor(0, nil)
	if x == nil {
		return nil
	}
	r := x.Type.Rank()
	if len(b.Args)-1 != r {
		return b.Failf("permute of a rank-%d tensor needs %d dims, got %d", r, r, len(b.Args)-1)
	}
	perm := make([]int, r)
	seen := make([]bool, r)
	for i := range perm {
		d, ok := b.axisAttr(i+1, "dim", 0, r, true)
		if !ok {
			return nil
		}
		if seen[d] {
			return b.Failf("permute: dim %d appears twice", d)
		}
		seen[d] = true
		perm[i] = d
	}
	return permuted(b, x, perm)
}

func reshapeOp(b *Call) *ir.Value {
	if len(b.Args) < 1 {
		return b.Failf("reshape takes x and the new dims")
	}
	x := b.Tensor(0, nil)
	if x == nil {
		return nil
	}
	shape := make([]int, len(b.Args)-1)
	infer := -1
	known := 1
	for i := range shape {
		d, ok := b.IntAttr(i+1, "dim", 0, true)
		if !ok {
			return nil
		}
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 1:
			return b.Failf("reshape: dim %d is invalid (positive, or one -1 to infer)", d)
		default:
			known *= d
		}
		shape[i] = d
	}
	n := x.Type.Numel()
	if infer >= 0 {
		if n%known != 0 {
			return b.Failf("shape mismatch in reshape: cannot reshape %s into %s", ir.ShapeString(x.Type.Shape), ir.ShapeString(shape))
		}
		shape[infer] = n / known
		known *= shape[infer]
	}
	if known != n {
		return b.Failf("shape mismatch in reshape: cannot reshape %s (%d elements) into %s", ir.ShapeString(x.Type.Shape), n, ir.ShapeString(shape))
	}
	return b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x)
}

func concatOp(b *Call) *ir.Value {
	if len(b.Args) < 1 {
		return b.Failf("concat takes tensors and axis=")
	}
	var xs []*ir.Value
	for i := range b.Args {
		x := b.Tensor(i, nil)
		if x == nil {
			return nil
		}
		xs = append(xs, x)
	}
	r := xs[0].Type.Rank()
	if r == 0 {
		return b.Failf("concat needs tensors of rank >= 1")
	}
	ax, ok := b.axisAttr(-1, "axis", 0, r, false)
	if !ok {
		return nil
	}
	shape := append([]int{}, xs[0].Type.Shape...)
	for _, x := range xs[1:] {
		if !b.sameDType(xs[0], x) {
			return nil
		}
		if x.Type.Rank() != r {
			return b.Failf("shape mismatch in concat: %s and %s", ir.ShapeString(xs[0].Type.Shape), ir.ShapeString(x.Type.Shape))
		}
		for d := range shape {
			if d != ax && x.Type.Shape[d] != shape[d] {
				return b.Failf("shape mismatch in concat along axis %d: %s and %s", ax, ir.ShapeString(xs[0].Type.Shape), ir.ShapeString(x.Type.Shape))
			}
		}
		shape[ax] += x.Type.Shape[ax]
	}
	v := b.NewValue(ir.Type{DType: xs[0].Type.DType, Shape: shape}, xs...)
	v.Attrs.Axis = ax
	return v
}

// axisAndTwoInts reads the (x, axis, i, j) arguments slice and pad share.
func (b *Call) axisAndTwoInts(first, second string) (x *ir.Value, ax, i, j int, ok bool) {
	if !b.NArgs(4, 4) {
		return nil, 0, 0, 0, false
	}
	if x = b.Tensor(0, nil); x == nil {
		return nil, 0, 0, 0, false
	}
	if x.Type.Rank() == 0 {
		b.Failf("%s needs a tensor of rank >= 1", b.Name)
		return nil, 0, 0, 0, false
	}
	if ax, ok = b.axisAttr(1, "axis", 0, x.Type.Rank(), true); !ok {
		return nil, 0, 0, 0, false
	}
	i, ok1 := b.IntAttr(2, first, 0, true)
	j, ok2 := b.IntAttr(3, second, 0, true)
	return x, ax, i, j, ok1 && ok2
}

func sliceOp(b *Call) *ir.Value {
	x, ax, start, end, ok := b.axisAndTwoInts("start", "end")
	if !ok {
		return nil
	}
	n := x.Type.Shape[ax]
	if start < 0 || end > n || start >= end {
		return b.Failf("slice [%d:%d] out of range for dim %d of size %d", start, end, ax, n)
	}
	shape := append([]int{}, x.Type.Shape...)
	shape[ax] = end - start
	v := b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Axis, v.Attrs.Start, v.Attrs.End = ax, start, end
	return v
}

// transposeVJP is the gradient of transpose.
func transposeVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	inv := make([]Arg, len(v.Attrs.Perm))
	for i, p := range v.Attrs.Perm {
		inv[p] = N(float64(i))
	}
	b.acc(a[0], b.op("permute", append([]Arg{T(g)}, inv...)...))
}

// reshapeVJP is the gradient of reshape.
func reshapeVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("reshape", append([]Arg{T(g)}, Dims(a[0].Type.Shape)...)...))
}

// concatVJP is the gradient of concat.
func concatVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	off := 0
	for _, x := range a {
		l := x.Type.Shape[v.Attrs.Axis]
		b.acc(x, b.op("slice", T(g), N(float64(v.Attrs.Axis)), N(float64(off)), N(float64(off+l))))
		off += l
	}
}

// sliceVJP is the gradient of slice.
func sliceVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	full := a[0].Type.Shape[v.Attrs.Axis]
	b.acc(a[0], b.op("pad", T(g), N(float64(v.Attrs.Axis)), N(float64(v.Attrs.Start)), N(float64(full-v.Attrs.End))))
}
