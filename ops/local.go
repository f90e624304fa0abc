package ops

import (
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
)

// The local view's ops. Inside a local function every value is one
// device's block; these ops are its boundary (to_local, from_local) and its
// explicit communication. They are not placed by rule tables: inference
// gives every local value a replicated placement over its own (local)
// shape, the boundary converts from and to the placements the function
// declares, and the spmd pass emits each collective as it is written.
//
// Their gradients are the collectives' transposes under the local view's
// convention (see lang's local view): a value that is the same on every
// device of an axis has a gradient that is the same there too and stands
// for the derivative of the one logical value. So all_reduce, whose result
// is the same everywhere, passes its gradient back unchanged; pvary (an
// invariant value used where devices differ) sums it; all_gather and
// reduce_scatter, broadcast and reduce, a shift and the opposite shift,
// and an all_to_all and the reverse one are each other's transposes.

func init() {
	local := func(name, call, shape, text string, t TypeRule, g GradRule) {
		Register(Op{Name: name, Family: "local", Kind: LocalView, Type: t, Grad: g,
			Doc: Doc{Rows: []Row{{call, shape, text}}}})
	}
	local("to_local", "`to_local(x)` (a local function's argument)", "the block of `x`'s declared placement",
		"the device's block of a global value, as the local body sees it", toLocalOp, toLocalVJP)
	local("from_local", "`from_local(y)` (a local function's result)", "blocks joined by the declared placement",
		"the global value whose blocks the devices hold", fromLocalOp, fromLocalVJP)
	local("all_reduce", "`all_reduce(x, r)`, `all_reduce(x, r, c)`", "same shape",
		"sum over the group of the named axes; every device gets it", collectiveOp(keepShape), allReduceVJP)
	local("all_gather", "`all_gather(x, r, dim=0)`", "dim `dim` × group size",
		"the group's blocks concatenated along `dim`, in row-major order of the listed axes", collectiveOp(gatherShape), allGatherVJP)
	local("reduce_scatter", "`reduce_scatter(x, r, dim=0)`", "dim `dim` ÷ group size (must divide)",
		"sum over the group, cut along `dim`; the device at position i (row-major over the listed axes) keeps piece i", collectiveOp(scatterShape), reduceScatterVJP)
	local("all_to_all", "`all_to_all(x, r, split=1, concat=0)`", "`split` ÷ p, `concat` × p",
		"piece i of `x` cut along `split` goes to member i; what arrives is concatenated along `concat`", collectiveOp(allToAllShape), allToAllVJP)
	local("broadcast", "`broadcast(x, r, root=t)`", "same shape", "member `t`'s block, on every member", collectiveOp(keepShape), broadcastVJP)
	local("reduce", "`reduce(x, r, root=t)`", "same shape", "the group's sum on member `t`, zeros on the others", collectiveOp(keepShape), reduceVJP)
	local("shift", "`shift(x, r=1)`, `shift(x, r=1, c=-1)`", "same shape",
		"the block of the device at this coordinate minus the offsets (a ring: send to +offset, receive from −offset)", collectiveOp(keepShape), shiftVJP)
	local("pvary", "`pvary(x, d)` (also inserted)", "same shape",
		"x, from now on allowed to differ along d: identity; its gradient is summed over d (the checker inserts one where a value that does not vary meets one that does)", collectiveOp(keepShape), pvaryVJP)
	local("equal_copies", "(inserted) `equal_copies(y)`", "same shape",
		"a result declared B on an axis its blocks may differ on: taken as the mean of equal copies; the gradient is split evenly", equalCopiesOp, equalCopiesVJP)
	Register(Op{Name: "arange", Family: "local", Kind: LocalView, Type: arangeOp, NoGrad: true,
		Doc: Doc{Rows: []Row{{"`arange(n)`", "`f32[n]`", "0, 1, …, n−1 on every device (positions for masks)"}}}})
	Register(Op{Name: "axis_index", Family: "local", Kind: LocalView, Type: axisIndexOp, NoGrad: true,
		Doc: Doc{Rows: []Row{{"`axis_index(r)`", "`f32[1]`", "this device's coordinate along mesh axis `r`"}}}})
}

// groupAxes reads the mesh axes of a local collective (keyword "axes")
// and returns them with the group's size.
func (b *Call) groupAxes() ([]int, int, bool) {
	kv, ok := b.Kw["axes"]
	delete(b.Kw, "axes")
	if !ok || len(kv.Ints) == 0 {
		b.Failf("%s needs the mesh axes of its group", b.Name)
		return nil, 0, false
	}
	if b.Mesh == nil {
		b.Failf("%s needs a mesh", b.Name)
		return nil, 0, false
	}
	p := 1
	for i, a := range kv.Ints {
		if a < 0 || a >= b.Mesh.NumAxes() || slices.Contains(kv.Ints[:i], a) {
			b.Failf("%s: bad mesh axes %v", b.Name, kv.Ints)
			return nil, 0, false
		}
		p *= b.Mesh.Axes[a].Size
	}
	return slices.Clone(kv.Ints), p, true
}

// shapeRule computes a collective's result shape from its input's, the
// group size and its attributes (nil shape: the problem is in b.Err()).
type shapeRule func(b *Call, v *ir.Value, shape []int, p int) []int

// collectiveOp types one local collective: one tensor and its group.
func collectiveOp(shape shapeRule) TypeRule {
	return func(b *Call) *ir.Value {
		if !b.NArgs(1, 1) {
			return nil
		}
		x := b.Tensor(0, nil)
		if x == nil {
			return nil
		}
		axes, p, ok := b.groupAxes()
		if !ok {
			return nil
		}
		v := b.NewValue(ir.Type{DType: x.Type.DType}, x)
		v.Attrs.Axes = axes
		if v.Type.Shape = shape(b, v, slices.Clone(x.Type.Shape), p); v.Type.Shape == nil {
			return nil
		}
		return v
	}
}

func keepShape(b *Call, v *ir.Value, shape []int, p int) []int {
	switch b.Name {
	case "broadcast", "reduce":
		if len(v.Attrs.Axes) != 1 {
			b.Failf("%s runs along one mesh axis", b.Name)
			return nil
		}
		root, ok := b.IntAttr(-1, "root", 0, true)
		if !ok {
			return nil
		}
		if root < 0 || root >= p {
			b.Failf("%s: root %d out of range for an axis of %d devices", b.Name, root, p)
			return nil
		}
		v.Attrs.Root = root
	case "shift":
		kv := b.Kw["by"]
		delete(b.Kw, "by")
		if len(kv.Ints) != len(v.Attrs.Axes) {
			b.Failf("shift needs one offset per axis")
			return nil
		}
		v.Attrs.Shift = slices.Clone(kv.Ints)
	}
	return shape
}

// dimAttr reads the dim keyword of a collective that cuts or joins one.
func (b *Call) dimAttr(key string, v *ir.Value, rank int) (int, bool) {
	if rank == 0 {
		b.Failf("%s needs a tensor of rank >= 1", b.Name)
		return 0, false
	}
	return b.axisAttr(-1, key, 0, rank, false)
}

func gatherShape(b *Call, v *ir.Value, shape []int, p int) []int {
	d, ok := b.dimAttr("dim", v, len(shape))
	if !ok {
		return nil
	}
	v.Attrs.Axis = d
	shape[d] *= p
	return shape
}

func scatterShape(b *Call, v *ir.Value, shape []int, p int) []int {
	d, ok := b.dimAttr("dim", v, len(shape))
	if !ok {
		return nil
	}
	if shape[d]%p != 0 {
		b.Failf("%s: dim %d of size %d does not split evenly over %d devices", b.Name, d, shape[d], p)
		return nil
	}
	v.Attrs.Axis = d
	shape[d] /= p
	return shape
}

func allToAllShape(b *Call, v *ir.Value, shape []int, p int) []int {
	if len(v.Attrs.Axes) != 1 {
		b.Failf("all_to_all runs along one mesh axis")
		return nil
	}
	s, ok := b.dimAttr("split", v, len(shape))
	if !ok {
		return nil
	}
	c, ok := b.dimAttr("concat", v, len(shape))
	if !ok {
		return nil
	}
	if s == c {
		b.Failf("all_to_all: split and concat are both dim %d; they must differ", s)
		return nil
	}
	if shape[s]%p != 0 {
		b.Failf("all_to_all: dim %d of size %d does not split evenly over %d devices", s, shape[s], p)
		return nil
	}
	v.Attrs.Axis, v.Attrs.Dim2 = s, c
	shape[s] /= p
	shape[c] *= p
	return shape
}

// boundary reads the declared placement of to_local and from_local.
func (b *Call) boundary() (*ir.Value, sbp.NdSBP, bool) {
	if !b.NArgs(1, 1) {
		return nil, nil, false
	}
	x := b.Tensor(0, nil)
	kv := b.Kw["place"]
	delete(b.Kw, "place")
	if x == nil || b.Mesh == nil || len(kv.Place) != b.Mesh.NumAxes() {
		b.Failf("%s needs a tensor and a placement of the mesh", b.Name)
		return nil, nil, false
	}
	for _, s := range kv.Place {
		if s.IsS() && s.Dim >= x.Type.Rank() {
			b.Failf("%s: placement %s splits dim %d of a rank-%d tensor", b.Name, kv.Place, s.Dim, x.Type.Rank())
			return nil, nil, false
		}
	}
	return x, kv.Place.Clone(), true
}

// toLocalOp is a device's block of x under the declared placement. The
// local view needs equal blocks: every split must divide, unless the
// function is padded (keyword padded=1), when the blocks are the largest
// one, zero-filled at the end.
func toLocalOp(b *Call) *ir.Value {
	x, pl, ok := b.boundary()
	if !ok {
		return nil
	}
	padded, ok := b.IntAttr(-1, "padded", 0, false)
	if !ok {
		return nil
	}
	shape := slices.Clone(x.Type.Shape)
	for a, s := range pl {
		if !s.IsS() {
			continue
		}
		p := b.Mesh.Axes[a].Size
		if shape[s.Dim]%p != 0 && padded == 0 {
			return b.Failf("dim %d of size %d does not split evenly over %s=%d: a local function needs equal blocks (%s); `local padded def` pads them with zeros",
				s.Dim, x.Type.Shape[s.Dim], b.Mesh.Axes[a].Name, p, ir.ShapeString(x.Type.Shape))
		}
		shape[s.Dim] = (shape[s.Dim] + p - 1) / p // the largest block of a balanced split
	}
	v := b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Place = pl
	return v
}

// fromLocalOp is the global value whose blocks are y under the placement:
// of the given shape (keyword shape), whose largest blocks must be y's,
// or else the blocks joined whole.
func fromLocalOp(b *Call) *ir.Value {
	y, pl, ok := b.boundary()
	if !ok {
		return nil
	}
	kv := b.Kw["shape"]
	delete(b.Kw, "shape")
	shape := slices.Clone(y.Type.Shape)
	for a, s := range pl {
		if s.IsS() {
			shape[s.Dim] *= b.Mesh.Axes[a].Size
		}
	}
	if kv.Ints != nil {
		if len(kv.Ints) != len(shape) {
			return b.Failf("from_local: shape %v for a rank-%d block", kv.Ints, len(shape))
		}
		for d, n := range kv.Ints {
			want := n
			for a, s := range pl {
				if s.IsS() && s.Dim == d {
					p := b.Mesh.Axes[a].Size
					want = (want + p - 1) / p
				}
			}
			if want != y.Type.Shape[d] || n > shape[d] {
				return b.Failf("from_local: blocks of %s do not make a tensor of shape %s under %s", ir.ShapeString(y.Type.Shape), ir.ShapeString(kv.Ints), pl)
			}
		}
		shape = slices.Clone(kv.Ints)
	}
	v := b.NewValue(ir.Type{DType: y.Type.DType, Shape: shape}, y)
	v.Attrs.Place = pl
	return v
}

func equalCopiesOp(b *Call) *ir.Value {
	v := collectiveOp(keepShape)(b)
	if v != nil {
		p := 1
		for _, a := range v.Attrs.Axes {
			p *= b.Mesh.Axes[a].Size
		}
		v.Attrs.Scalar = float64(p)
	}
	return v
}

func arangeOp(b *Call) *ir.Value {
	if !b.NArgs(1, 1) {
		return nil
	}
	n, ok := b.IntAttr(0, "n", 0, true)
	if !ok {
		return nil
	}
	if n < 1 || n > 1<<30 {
		return b.Failf("arange: n = %d out of range (1 to 2^30)", n)
	}
	return b.NewValue(ir.Type{DType: ir.F32, Shape: []int{n}})
}

func axisIndexOp(b *Call) *ir.Value {
	if !b.NArgs(0, 0) {
		return nil
	}
	axes, _, ok := b.groupAxes()
	if !ok {
		return nil
	}
	if len(axes) != 1 {
		return b.Failf("axis_index names one mesh axis")
	}
	v := b.NewValue(ir.Type{DType: ir.F32, Shape: []int{1}})
	v.Attrs.Axes = axes
	return v
}

// The transposes.

func axesKw(v *ir.Value, extra map[string]Arg) map[string]Arg {
	kw := map[string]Arg{"axes": {Ints: v.Attrs.Axes}}
	for k, a := range extra {
		kw[k] = a
	}
	return kw
}

// splitsOnly keeps a boundary placement's splits and makes the rest B:
// a replicated value's gradient is the same everywhere (the derivative of
// the one value), and so is a partial one's, as every device's part enters
// the sum with weight one.
func splitsOnly(pl sbp.NdSBP) sbp.NdSBP {
	out := pl.Clone()
	for a, s := range out {
		if !s.IsS() {
			out[a] = sbp.B
		}
	}
	return out
}

func toLocalVJP(b *Grad) {
	pl := splitsOnly(b.V.Attrs.Place)
	x := b.V.Args[0]
	b.acc(x, b.opKw("from_local", map[string]Arg{"place": {Place: pl}, "shape": {Ints: x.Type.Shape}}, T(b.G)))
}

func fromLocalVJP(b *Grad) {
	pl := splitsOnly(b.V.Attrs.Place)
	b.acc(b.V.Args[0], b.opKw("to_local", map[string]Arg{"place": {Place: pl}, "padded": N(1)}, T(b.G)))
}

func allReduceVJP(b *Grad) { b.acc(b.V.Args[0], b.G) }

func pvaryVJP(b *Grad) {
	b.acc(b.V.Args[0], b.opKw("all_reduce", axesKw(b.V, nil), T(b.G)))
}

func equalCopiesVJP(b *Grad) {
	b.acc(b.V.Args[0], b.op("mul", T(b.G), N(1/b.V.Attrs.Scalar)))
}

func allGatherVJP(b *Grad) {
	b.acc(b.V.Args[0], b.opKw("reduce_scatter", axesKw(b.V, map[string]Arg{"dim": N(float64(b.V.Attrs.Axis))}), T(b.G)))
}

func reduceScatterVJP(b *Grad) {
	b.acc(b.V.Args[0], b.opKw("all_gather", axesKw(b.V, map[string]Arg{"dim": N(float64(b.V.Attrs.Axis))}), T(b.G)))
}

func allToAllVJP(b *Grad) {
	kw := axesKw(b.V, map[string]Arg{"split": N(float64(b.V.Attrs.Dim2)), "concat": N(float64(b.V.Attrs.Axis))})
	b.acc(b.V.Args[0], b.opKw("all_to_all", kw, T(b.G)))
}

func broadcastVJP(b *Grad) {
	b.acc(b.V.Args[0], b.opKw("reduce", axesKw(b.V, map[string]Arg{"root": N(float64(b.V.Attrs.Root))}), T(b.G)))
}

func reduceVJP(b *Grad) {
	b.acc(b.V.Args[0], b.opKw("broadcast", axesKw(b.V, map[string]Arg{"root": N(float64(b.V.Attrs.Root))}), T(b.G)))
}

func shiftVJP(b *Grad) {
	back := make([]int, len(b.V.Attrs.Shift))
	for i, s := range b.V.Attrs.Shift {
		back[i] = -s
	}
	b.acc(b.V.Args[0], b.opKw("shift", axesKw(b.V, map[string]Arg{"by": {Ints: back}}), T(b.G)))
}
