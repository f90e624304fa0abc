package lang

import (
	"errors"
	"slices"

	"github.com/meshrun/meshrun/ops"
)

// Calls of built-in functions. Ops — their type, placement and gradient
// rules — are registered in package ops; the few calls here are language,
// not ops: to() takes a placement literal, grad() runs autodiff and
// index() is sugar for a slice and a reshape.

// langBuiltin checks a language call; raw holds its operands as evaluated
// (to() needs its placement literal).
type langBuiltin func(c *Checker, b *ops.Call, raw []operand) *Value

var langBuiltins map[string]langBuiltin

func init() {
	langBuiltins = map[string]langBuiltin{"to": toOp, "grad": gradOp, "index": indexOp}
}

// BuiltinRows are the op-table lines (spec.md) of the calls that are
// language rather than ops.
func BuiltinRows() []ops.Row {
	return []ops.Row{
		{Call: "`to(x, {placement})`", Shape: "same shape", Text: "explicit conversion; the compiler inserts the boxing"},
		{Call: "`index(W, i)`", Shape: "drops dim 0", Text: "`W[i]` for an integer constant i: `slice` along dim 0, then `reshape`"},
		{Call: "`grad(y, x)`", Shape: "`x`'s shape", Text: "∂y/∂x for a float scalar `y` (reverse mode, see [Autodiff](#autodiff)); zeros when `y` does not depend on `x`"},
	}
}

// isBuiltin reports a built-in call name.
func isBuiltin(name string) bool {
	_, lang := langBuiltins[name]
	_, op := ops.TypeOf(name)
	return lang || op
}

// builtinNames lists the built-in call names (for "did you mean").
func builtinNames() []string {
	names := ops.Calls()
	for n := range langBuiltins {
		names = append(names, n)
	}
	return names
}

// BuiltinOps lists the forward IR ops (for rule coverage tests).
func BuiltinOps() []string { return ops.Names(ops.Forward) }

// GradOps lists the gradient helper ops.
func GradOps() []string { return ops.Names(ops.Helper) }

// OptimOps lists the fused optimizer ops.
func OptimOps() []string { return ops.Names(ops.Optim) }

// Broadcast computes NumPy's broadcast of two shapes (ops.Broadcast).
func Broadcast(a, b []int) ([]int, bool) { return ops.Broadcast(a, b) }

// newCall prepares a call for a type rule; numbers used as tensors become
// scalar constants at the call's position.
func (c *Checker) newCall(pos Pos, name string, args []operand, kw map[string]operand) *ops.Call {
	// sized once, and no keyword map without keywords (rules only read
	// and delete keys): autodiff builds a call per gradient op
	b := &ops.Call{Name: name, Pos: pos}
	if len(args) > 0 {
		b.Args = make([]ops.Arg, len(args))
	}
	for i, a := range args {
		b.Args[i] = a.arg()
	}
	if len(kw) > 0 {
		b.Kw = make(map[string]ops.Arg, len(kw))
	}
	for k, a := range kw {
		b.Kw[k] = a.arg()
	}
	b.Const = func(f float64, dt DType) *Value { return c.constValue(numOp(f), dt, pos) }
	b.Mesh = c.g.Mesh
	return b
}

// typeRule runs the rule of a built-in call: the result (not yet in the
// graph, except grad's adjoint), or nil with the problem in b.Err() or
// already reported.
func (c *Checker) typeRule(b *ops.Call, raw []operand) *Value {
	if f, ok := langBuiltins[b.Name]; ok {
		return f(c, b, raw)
	}
	rule, _ := ops.TypeOf(b.Name)
	return rule(b)
}

func (c *Checker) apply(pos Pos, name string, args []operand, kw map[string]operand) operand {
	for _, a := range args {
		if a.bad || invalid(a.v) {
			return operand{bad: true}
		}
	}
	b := c.newCall(pos, name, args, kw)
	v := c.typeRule(b, args)
	if msg := b.Err(); msg != "" {
		c.errorf(pos, "%s", msg)
		return operand{bad: true}
	}
	if v == nil || invalid(v) {
		return operand{bad: true}
	}
	for k := range b.Kw {
		c.errorf(pos, "%s has no argument %q", name, k)
		return operand{bad: true}
	}
	if c.g.Has(v) {
		return operand{v: v} // an existing value (grad returns an adjoint)
	}
	return operand{v: c.add(v)}
}

// mk applies a built-in op to operands, reusing its type rules. A type
// error here is a bug in a VJP rule or in the training step's construction,
// not in the program: it is reported as an internal error at pos and mk
// returns an invalid value (see add) instead of panicking.
func (c *Checker) mk(pos Pos, name string, args []operand, kw map[string]operand) *Value {
	for _, a := range args {
		if invalid(a.v) {
			return &Value{ID: -1, Op: name, Pos: pos}
		}
	}
	b := c.newCall(pos, name, args, kw)
	nerr := len(c.errs)
	v := c.typeRule(b, args)
	if c.tooLarge {
		return &Value{ID: -1, Op: name, Pos: pos} // reported where the budget ran out
	}
	if v == nil || b.Err() != "" || len(c.errs) > nerr {
		errs := ErrorList(slices.Clone(c.errs[nerr:]))
		c.errs = c.errs[:nerr]
		var err error = errs
		if msg := b.Err(); msg != "" {
			err = errors.New(msg)
		}
		c.errorf(pos, "internal error: building %s: %v", name, err)
		return &Value{ID: -1, Op: name, Pos: pos}
	}
	return c.add(v)
}

func toOp(c *Checker, b *ops.Call, raw []operand) *Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	x := b.Tensor(0, nil)
	if x == nil {
		return nil
	}
	lit := raw[1].placement
	if lit == nil {
		return b.Failf("to(x, {...}): the second argument must be a placement")
	}
	p, ok := c.placement(lit, x.Type)
	if !ok {
		return nil // reported
	}
	v := b.NewValue(x.Type, x)
	v.Declared = p
	return v
}

// indexOp is index(W, i) = W[i]: a slice along dim 0 and a reshape that
// drops it, so stacked per-layer parameters can be written once:
// param Wq : f32[L, H, H]; for l in range(L) { ... index(Wq, l) ... }.
func indexOp(c *Checker, b *ops.Call, _ []operand) *Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	w := b.Tensor(0, nil)
	if w == nil {
		return nil
	}
	if w.Type.Rank() == 0 {
		return b.Failf("index needs a tensor of rank >= 1")
	}
	i, ok := b.IntAttr(1, "i", 0, true)
	if !ok {
		return nil
	}
	if i < 0 || i >= w.Type.Shape[0] {
		return b.Failf("index %d out of range for dim 0 of size %d", i, w.Type.Shape[0])
	}
	s := c.mk(b.Pos, "slice", []operand{{v: w}, numOp(0), numOp(float64(i)), numOp(float64(i + 1))}, nil)
	return &Value{Op: "reshape", Type: Type{DType: w.Type.DType, Shape: append([]int{}, w.Type.Shape[1:]...)}, Args: []*Value{s}, Pos: b.Pos}
}
