package lang

import (
	"fmt"
	"math"
)

// The built-in ops and their type rules (dtype and shape). Placement rules
// live in package sbp, one file per op family; every op here has one there
// (a test checks it).

type builtinFn func(c *Checker, b *binder) *Value

// binder holds one call's arguments while a builtin checks them.
type binder struct {
	name string
	pos  Pos
	args []operand
	kw   map[string]operand
	ok   bool
}

var builtins map[string]builtinFn

func init() {
	builtins = map[string]builtinFn{
		"matmul": matmulOp, "add": binaryOp, "sub": binaryOp, "mul": binaryOp, "div": binaryOp,
		"minimum": binaryOp, "maximum": binaryOp,
		"neg": unaryOp, "exp": unaryOp, "log": unaryOp, "sqrt": unaryOp, "tanh": unaryOp,
		"relu": unaryOp, "gelu": unaryOp, "sigmoid": unaryOp,
		"softmax": softmaxOp, "log_softmax": softmaxOp, "layernorm": layernormOp,
		"sum": reduceOp, "mean": reduceOp, "max": reduceOp,
		"transpose": transposeOp, "permute": permuteOp, "reshape": reshapeOp,
		"concat": concatOp, "slice": sliceOp, "embedding": embeddingOp,
		"cross_entropy": crossEntropyOp, "mse": mseOp, "to": toOp,
	}
	builtins["grad"] = gradOp // assigned apart: these refer to builtins
	builtins["index"] = indexOp
	builtins["cast"] = castOp
	builtins["where"] = whereOp
	builtins["nonfinite"] = nonfiniteOp
}

// BuiltinOps lists the IR op names the builtins produce (for rule coverage tests).
func BuiltinOps() []string {
	return []string{"matmul", "add", "sub", "mul", "div", "minimum", "maximum", "neg", "exp", "log", "sqrt", "tanh", "relu", "gelu",
		"sigmoid", "softmax", "log_softmax", "layernorm", "sum", "mean", "max", "transpose", "reshape",
		"concat", "slice", "embedding", "cross_entropy", "mse", "const", "cast", "where", "nonfinite"}
}

func (c *Checker) apply(pos Pos, name string, args []operand, kw map[string]operand) operand {
	for _, a := range args {
		if a.bad {
			return operand{bad: true}
		}
	}
	b := &binder{name: name, pos: pos, args: args, kw: kw, ok: true}
	v := builtins[name](c, b)
	if v == nil {
		return operand{bad: true}
	}
	for k := range b.kw {
		c.errorf(pos, "%s has no argument %q", name, k)
		return operand{bad: true}
	}
	if v.ID < len(c.g.Values) && c.g.Values[v.ID] == v {
		return operand{v: v} // an existing value (grad returns an adjoint)
	}
	return operand{v: c.add(v)}
}

func (c *Checker) fail(b *binder, format string, args ...any) *Value {
	if b.ok {
		c.errorf(b.pos, format, args...)
	}
	b.ok = false
	return nil
}

func (c *Checker) nargs(b *binder, lo, hi int) bool {
	if len(b.args) < lo || len(b.args) > hi {
		want := fmt.Sprint(lo)
		if hi != lo {
			want = fmt.Sprintf("%d to %d", lo, hi)
		}
		c.fail(b, "%s takes %s arguments, got %d", b.name, want, len(b.args))
		return false
	}
	return true
}

// tensor returns argument i as a tensor; numbers become scalar constants of
// dtype like (or f32 when like is nil).
func (c *Checker) tensor(b *binder, i int, like *Value) *Value {
	a := b.args[i]
	if a.v != nil {
		return a.v
	}
	if a.num != nil {
		dt := F32
		if like != nil {
			dt = like.Type.DType
		}
		return c.constValue(a, dt, b.pos)
	}
	c.fail(b, "argument %d of %s must be a tensor", i+1, b.name)
	return nil
}

func (c *Checker) floatTensor(b *binder, v *Value) bool {
	if v != nil && !v.Type.DType.IsFloat() {
		c.fail(b, "%s needs a float tensor, got %s", b.name, v.Type)
		return false
	}
	return v != nil
}

// intAttr reads an integer attribute: a positional argument i (when
// i < len(args)) or keyword key, else def.
func (c *Checker) intAttr(b *binder, i int, key string, def int, required bool) (int, bool) {
	var op operand
	found := false
	if i >= 0 && i < len(b.args) {
		op, found = b.args[i], true
	} else if kv, ok := b.kw[key]; ok {
		op, found = kv, true
		delete(b.kw, key)
	}
	if !found {
		if required {
			c.fail(b, "%s needs %s", b.name, key)
			return 0, false
		}
		return def, true
	}
	if op.num == nil || *op.num != math.Trunc(*op.num) || math.Abs(*op.num) > 1<<31 {
		c.fail(b, "%s: %s must be an integer constant", b.name, key)
		return 0, false
	}
	return int(*op.num), true
}

func (c *Checker) axisAttr(b *binder, i int, key string, def int, rank int, required bool) (int, bool) {
	ax, ok := c.intAttr(b, i, key, def, required)
	if !ok {
		return 0, false
	}
	if ax < 0 {
		ax += rank
	}
	if ax < 0 || ax >= rank {
		c.fail(b, "%s: %s %d out of range for rank %d", b.name, key, ax, rank)
		return 0, false
	}
	return ax, true
}

func (c *Checker) sameDType(b *binder, x, y *Value) bool {
	if x.Type.DType != y.Type.DType {
		c.fail(b, "dtype mismatch in %s: %s and %s", b.name, x.Type.DType, y.Type.DType)
		return false
	}
	return true
}

func newValue(b *binder, t Type, args ...*Value) *Value {
	return &Value{Op: b.name, Type: t, Args: args, Pos: b.pos}
}

func unaryOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 1, 1) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	return newValue(b, x.Type, x)
}

// Broadcast computes NumPy's broadcast of two shapes.
func Broadcast(a, b []int) ([]int, bool) {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		x, y := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			x = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			y = b[j]
		}
		switch {
		case x == y || y == 1:
			out[i] = x
		case x == 1:
			out[i] = y
		default:
			return nil, false
		}
	}
	return out, true
}

func binaryOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	var like *Value
	if b.args[0].v != nil {
		like = b.args[0].v
	} else {
		like = b.args[1].v
	}
	x, y := c.tensor(b, 0, like), c.tensor(b, 1, like)
	if !c.floatTensor(b, x) || !c.floatTensor(b, y) || !c.sameDType(b, x, y) {
		return nil
	}
	shape, ok := Broadcast(x.Type.Shape, y.Type.Shape)
	if !ok {
		return c.fail(b, "shape mismatch in %s: %s and %s do not broadcast", b.name, ShapeString(x.Type.Shape), ShapeString(y.Type.Shape))
	}
	return newValue(b, Type{x.Type.DType, shape}, x, y)
}

func matmulOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x, y := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if !c.floatTensor(b, x) || !c.floatTensor(b, y) || !c.sameDType(b, x, y) {
		return nil
	}
	xs, ys := x.Type.Shape, y.Type.Shape
	if len(xs) < 2 || len(ys) < 2 {
		return c.fail(b, "matmul needs operands of rank >= 2, got %s @ %s", ShapeString(xs), ShapeString(ys))
	}
	if xs[len(xs)-1] != ys[len(ys)-2] {
		return c.fail(b, "shape mismatch in matmul: %s @ %s (inner dims %d and %d differ)", ShapeString(xs), ShapeString(ys), xs[len(xs)-1], ys[len(ys)-2])
	}
	xb, yb := xs[:len(xs)-2], ys[:len(ys)-2]
	n := max(len(xb), len(yb))
	batch := make([]int, n)
	for i := 0; i < n; i++ {
		bx, by := -1, -1
		if j := i - (n - len(xb)); j >= 0 {
			bx = xb[j]
		}
		if j := i - (n - len(yb)); j >= 0 {
			by = yb[j]
		}
		if bx >= 0 && by >= 0 && bx != by {
			return c.fail(b, "shape mismatch in matmul: batch dims %s and %s differ", ShapeString(xb), ShapeString(yb))
		}
		batch[i] = max(bx, by)
	}
	out := append(batch, xs[len(xs)-2], ys[len(ys)-1])
	return newValue(b, Type{x.Type.DType, out}, x, y)
}

func softmaxOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 1, 2) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return c.fail(b, "%s needs a tensor of rank >= 1", b.name)
	}
	ax, ok := c.axisAttr(b, 1, "axis", -1, x.Type.Rank(), false)
	if !ok {
		return nil
	}
	v := newValue(b, x.Type, x)
	v.Attrs.Axis = ax
	return v
}

func layernormOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 3, 3) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	g, be := c.tensor(b, 1, x), c.tensor(b, 2, x)
	if !c.floatTensor(b, x) || !c.floatTensor(b, g) || !c.floatTensor(b, be) || !c.sameDType(b, x, g) || !c.sameDType(b, x, be) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return c.fail(b, "layernorm needs a tensor of rank >= 1")
	}
	h := x.Type.Shape[x.Type.Rank()-1]
	for _, p := range []*Value{g, be} {
		if ShapeString(p.Type.Shape) != ShapeString([]int{h}) {
			return c.fail(b, "shape mismatch in layernorm: gamma and beta must be [%d] for input %s, got %s", h, ShapeString(x.Type.Shape), ShapeString(p.Type.Shape))
		}
	}
	eps := 1e-5
	if e, ok := b.kw["eps"]; ok {
		delete(b.kw, "eps")
		if e.num == nil || *e.num <= 0 {
			return c.fail(b, "layernorm: eps must be a positive number")
		}
		eps = *e.num
	}
	v := newValue(b, x.Type, x, g, be)
	v.Attrs.Eps = eps
	return v
}

func reduceOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 1, 2) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	_, hasKw := b.kw["axis"]
	if len(b.args) < 2 && !hasKw {
		v := newValue(b, Type{x.Type.DType, []int{}}, x)
		v.Attrs.Axis = -1
		return v
	}
	if x.Type.Rank() == 0 {
		return c.fail(b, "%s: a scalar has no axis", b.name)
	}
	ax, ok := c.axisAttr(b, 1, "axis", 0, x.Type.Rank(), true)
	if !ok {
		return nil
	}
	shape := append(append([]int{}, x.Type.Shape[:ax]...), x.Type.Shape[ax+1:]...)
	v := newValue(b, Type{x.Type.DType, shape}, x)
	v.Attrs.Axis = ax
	return v
}

func transposeOp(c *Checker, b *binder) *Value {
	if len(b.args) != 1 && len(b.args) != 3 {
		return c.fail(b, "transpose takes x, or x and two dims to swap")
	}
	x := c.tensor(b, 0, nil)
	if x == nil {
		return nil
	}
	r := x.Type.Rank()
	if r < 2 && len(b.args) == 1 {
		return c.fail(b, "transpose(x) swaps the last two dims and needs rank >= 2, got %s", x.Type)
	}
	d0, d1 := r-2, r-1
	if len(b.args) == 3 {
		var ok bool
		if d0, ok = c.axisAttr(b, 1, "dim0", 0, r, true); !ok {
			return nil
		}
		if d1, ok = c.axisAttr(b, 2, "dim1", 0, r, true); !ok {
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

func permuted(b *binder, x *Value, perm []int) *Value {
	shape := make([]int, len(perm))
	for i, p := range perm {
		shape[i] = x.Type.Shape[p]
	}
	b.name = "transpose"
	v := newValue(b, Type{x.Type.DType, shape}, x)
	v.Attrs.Perm = perm
	return v
}

func permuteOp(c *Checker, b *binder) *Value {
	if len(b.args) < 1 {
		return c.fail(b, "permute takes x and a permutation of its dims")
	}
	x := c.tensor(b, 0, nil)
	if x == nil {
		return nil
	}
	r := x.Type.Rank()
	if len(b.args)-1 != r {
		return c.fail(b, "permute of a rank-%d tensor needs %d dims, got %d", r, r, len(b.args)-1)
	}
	perm := make([]int, r)
	seen := make([]bool, r)
	for i := range perm {
		d, ok := c.axisAttr(b, i+1, "dim", 0, r, true)
		if !ok {
			return nil
		}
		if seen[d] {
			return c.fail(b, "permute: dim %d appears twice", d)
		}
		seen[d] = true
		perm[i] = d
	}
	return permuted(b, x, perm)
}

// castOp is cast(x, "bf16"): a float tensor in another float dtype,
// rounded to nearest (ties to even).
func castOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	s := b.args[1].str
	dt, ok := DType(0), false
	if s != nil {
		dt, ok = ParseDType(*s)
	}
	if !ok || !dt.IsFloat() {
		return c.fail(b, "cast(x, \"dtype\"): the dtype must be \"f32\", \"f64\", \"bf16\" or \"f16\"")
	}
	return newValue(b, Type{dt, x.Type.Shape}, x)
}

// whereOp is where(c, a, b): a where c is non-zero, else b, elementwise
// with NumPy broadcasting (a float c: 0 is false).
func whereOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 3, 3) {
		return nil
	}
	var like *Value
	for _, a := range b.args[1:] {
		if a.v != nil {
			like = a.v
		}
	}
	cond, x, y := c.tensor(b, 0, like), c.tensor(b, 1, like), c.tensor(b, 2, like)
	if !c.floatTensor(b, cond) || !c.floatTensor(b, x) || !c.floatTensor(b, y) || !c.sameDType(b, x, y) {
		return nil
	}
	shape, ok := Broadcast(x.Type.Shape, y.Type.Shape)
	if ok {
		shape, ok = Broadcast(shape, cond.Type.Shape)
	}
	if !ok {
		return c.fail(b, "shape mismatch in where: %s, %s and %s do not broadcast", ShapeString(cond.Type.Shape), ShapeString(x.Type.Shape), ShapeString(y.Type.Shape))
	}
	return newValue(b, Type{x.Type.DType, shape}, cond, x, y)
}

// nonfiniteOp is nonfinite(x): 1 if any element of x is inf or NaN, else 0
// (a scalar of x's dtype; the loss scaler's overflow test).
func nonfiniteOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 1, 1) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	v := newValue(b, Type{x.Type.DType, []int{}}, x)
	v.Attrs.Axis = -1
	return v
}

// indexOp is index(W, i) = W[i]: a slice along dim 0 and a reshape that
// drops it, so stacked per-layer parameters can be written once:
// param Wq : f32[L, H, H]; for l in range(L) { ... index(Wq, l) ... }.
func indexOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	w := c.tensor(b, 0, nil)
	if w == nil {
		return nil
	}
	if w.Type.Rank() == 0 {
		return c.fail(b, "index needs a tensor of rank >= 1")
	}
	i, ok := c.intAttr(b, 1, "i", 0, true)
	if !ok {
		return nil
	}
	if i < 0 || i >= w.Type.Shape[0] {
		return c.fail(b, "index %d out of range for dim 0 of size %d", i, w.Type.Shape[0])
	}
	s := c.mk(b.pos, "slice", []operand{{v: w}, numOp(0), numOp(float64(i)), numOp(float64(i + 1))}, nil)
	v := newValue(&binder{name: "reshape", pos: b.pos}, Type{w.Type.DType, append([]int{}, w.Type.Shape[1:]...)}, s)
	return v
}

func reshapeOp(c *Checker, b *binder) *Value {
	if len(b.args) < 1 {
		return c.fail(b, "reshape takes x and the new dims")
	}
	x := c.tensor(b, 0, nil)
	if x == nil {
		return nil
	}
	shape := make([]int, len(b.args)-1)
	infer := -1
	known := 1
	for i := range shape {
		d, ok := c.intAttr(b, i+1, "dim", 0, true)
		if !ok {
			return nil
		}
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 1:
			return c.fail(b, "reshape: dim %d is invalid (positive, or one -1 to infer)", d)
		default:
			known *= d
		}
		shape[i] = d
	}
	n := x.Type.Numel()
	if infer >= 0 {
		if n%known != 0 {
			return c.fail(b, "shape mismatch in reshape: cannot reshape %s into %s", ShapeString(x.Type.Shape), ShapeString(shape))
		}
		shape[infer] = n / known
		known *= shape[infer]
	}
	if known != n {
		return c.fail(b, "shape mismatch in reshape: cannot reshape %s (%d elements) into %s", ShapeString(x.Type.Shape), n, ShapeString(shape))
	}
	return newValue(b, Type{x.Type.DType, shape}, x)
}

func concatOp(c *Checker, b *binder) *Value {
	if len(b.args) < 1 {
		return c.fail(b, "concat takes tensors and axis=")
	}
	var xs []*Value
	for i := range b.args {
		x := c.tensor(b, i, nil)
		if x == nil {
			return nil
		}
		xs = append(xs, x)
	}
	r := xs[0].Type.Rank()
	if r == 0 {
		return c.fail(b, "concat needs tensors of rank >= 1")
	}
	ax, ok := c.axisAttr(b, -1, "axis", 0, r, false)
	if !ok {
		return nil
	}
	shape := append([]int{}, xs[0].Type.Shape...)
	for _, x := range xs[1:] {
		if !c.sameDType(b, xs[0], x) {
			return nil
		}
		if x.Type.Rank() != r {
			return c.fail(b, "shape mismatch in concat: %s and %s", ShapeString(xs[0].Type.Shape), ShapeString(x.Type.Shape))
		}
		for d := range shape {
			if d != ax && x.Type.Shape[d] != shape[d] {
				return c.fail(b, "shape mismatch in concat along axis %d: %s and %s", ax, ShapeString(xs[0].Type.Shape), ShapeString(x.Type.Shape))
			}
		}
		shape[ax] += x.Type.Shape[ax]
	}
	v := newValue(b, Type{xs[0].Type.DType, shape}, xs...)
	v.Attrs.Axis = ax
	return v
}

// axisAndTwoInts reads the (x, axis, i, j) arguments slice and pad share.
func (c *Checker) axisAndTwoInts(b *binder, first, second string) (x *Value, ax, i, j int, ok bool) {
	if !c.nargs(b, 4, 4) {
		return nil, 0, 0, 0, false
	}
	if x = c.tensor(b, 0, nil); x == nil {
		return nil, 0, 0, 0, false
	}
	if x.Type.Rank() == 0 {
		c.fail(b, "%s needs a tensor of rank >= 1", b.name)
		return nil, 0, 0, 0, false
	}
	if ax, ok = c.axisAttr(b, 1, "axis", 0, x.Type.Rank(), true); !ok {
		return nil, 0, 0, 0, false
	}
	i, ok1 := c.intAttr(b, 2, first, 0, true)
	j, ok2 := c.intAttr(b, 3, second, 0, true)
	return x, ax, i, j, ok1 && ok2
}

func sliceOp(c *Checker, b *binder) *Value {
	x, ax, start, end, ok := c.axisAndTwoInts(b, "start", "end")
	if !ok {
		return nil
	}
	n := x.Type.Shape[ax]
	if start < 0 || end > n || start >= end {
		return c.fail(b, "slice [%d:%d] out of range for dim %d of size %d", start, end, ax, n)
	}
	shape := append([]int{}, x.Type.Shape...)
	shape[ax] = end - start
	v := newValue(b, Type{x.Type.DType, shape}, x)
	v.Attrs.Axis, v.Attrs.Start, v.Attrs.End = ax, start, end
	return v
}

func embeddingOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	w, idx := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if !c.floatTensor(b, w) || idx == nil {
		return nil
	}
	if w.Type.Rank() != 2 {
		return c.fail(b, "embedding table must be [vocab, hidden], got %s", ShapeString(w.Type.Shape))
	}
	if !idx.Type.DType.IsInt() {
		return c.fail(b, "embedding indices must be i32 or i64, got %s", idx.Type.DType)
	}
	shape := append(append([]int{}, idx.Type.Shape...), w.Type.Shape[1])
	return newValue(b, Type{w.Type.DType, shape}, w, idx)
}

func crossEntropyOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x, y := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if !c.floatTensor(b, x) || y == nil {
		return nil
	}
	if x.Type.Rank() != 2 || y.Type.Rank() != 1 || x.Type.Shape[0] != y.Type.Shape[0] {
		return c.fail(b, "shape mismatch in cross_entropy: want logits [N, C] and labels [N], got %s and %s", ShapeString(x.Type.Shape), ShapeString(y.Type.Shape))
	}
	if !y.Type.DType.IsInt() {
		return c.fail(b, "cross_entropy labels must be i32 or i64, got %s", y.Type.DType)
	}
	return newValue(b, Type{x.Type.DType, []int{}}, x, y)
}

func mseOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x, y := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if !c.floatTensor(b, x) || !c.floatTensor(b, y) || !c.sameDType(b, x, y) {
		return nil
	}
	if ShapeString(x.Type.Shape) != ShapeString(y.Type.Shape) {
		return c.fail(b, "shape mismatch in mse: %s and %s", ShapeString(x.Type.Shape), ShapeString(y.Type.Shape))
	}
	return newValue(b, Type{x.Type.DType, []int{}}, x, y)
}

func toOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if x == nil {
		return nil
	}
	lit := b.args[1].placement
	if lit == nil {
		return c.fail(b, "to(x, {...}): the second argument must be a placement")
	}
	p, ok := c.placement(lit, x.Type)
	if !ok {
		b.ok = false
		return nil
	}
	v := newValue(b, x.Type, x)
	v.Declared = p
	return v
}
