package lang

import (
	"fmt"
	"math"
	"slices"
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
		if a.bad || invalid(a.v) {
			return operand{bad: true}
		}
	}
	b := &binder{name: name, pos: pos, args: args, kw: kw, ok: true}
	v := builtins[name](c, b)
	if v == nil || invalid(v) {
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
	return newValue(b, Type{DType: x.Type.DType, Shape: shape}, x, y)
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
	return newValue(b, Type{DType: x.Type.DType, Shape: out}, x, y)
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
		if !slices.Equal(p.Type.Shape, []int{h}) {
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
		v := newValue(b, Type{DType: x.Type.DType, Shape: []int{}}, x)
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
	v := newValue(b, Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Axis = ax
	return v
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
	return newValue(b, Type{DType: x.Type.DType, Shape: shape}, cond, x, y)
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
	v := newValue(b, Type{DType: x.Type.DType, Shape: []int{}}, x)
	v.Attrs.Axis = -1
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
	return newValue(b, Type{DType: w.Type.DType, Shape: shape}, w, idx)
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
	return newValue(b, Type{DType: x.Type.DType, Shape: []int{}}, x, y)
}

func mseOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x, y := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if !c.floatTensor(b, x) || !c.floatTensor(b, y) || !c.sameDType(b, x, y) {
		return nil
	}
	if !slices.Equal(x.Type.Shape, y.Type.Shape) {
		return c.fail(b, "shape mismatch in mse: %s and %s", ShapeString(x.Type.Shape), ShapeString(y.Type.Shape))
	}
	return newValue(b, Type{DType: x.Type.DType, Shape: []int{}}, x, y)
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
