package lang

import (
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/sbp"
)

// operand is the result of evaluating an expression: a tensor value, a
// number (folded at compile time; it becomes a scalar const when it meets a
// tensor), a string (load paths) or a placement literal (to()).
type operand struct {
	v         *Value
	num       *float64
	str       *string
	placement *PlacementLit
	bad       bool // an error was already reported
	// ints and place are attributes the checker passes to the local
	// view's ops (mesh axes, shift offsets, boundary placements).
	ints  []int
	place sbp.NdSBP
}

func numOp(f float64) operand { return operand{num: &f} }

// arg is the operand as an op's argument (a placement literal is not one).
func (a operand) arg() ops.Arg {
	return ops.Arg{V: a.v, Num: a.num, Str: a.str, Ints: a.ints, Place: a.place}
}

// fromArg is an op's argument as an operand.
func fromArg(a ops.Arg) operand {
	return operand{v: a.V, num: a.Num, str: a.Str, ints: a.Ints, place: a.Place}
}

func (c *Checker) expr(e *Expr) operand {
	left := c.term(e.Left)
	for _, op := range e.Ops {
		right := c.term(op.Right)
		name := "add"
		if op.Op == "-" {
			name = "sub"
		}
		left = c.binary(op.Pos, name, left, right)
	}
	return left
}

func (c *Checker) term(t *Term) operand {
	left := c.unary(t.Left)
	for _, op := range t.Ops {
		right := c.unary(op.Right)
		name := map[string]string{"*": "mul", "/": "div", "@": "matmul"}[op.Op]
		left = c.binary(op.Pos, name, left, right)
	}
	return left
}

func (c *Checker) unary(u *Unary) operand {
	if u.Neg != nil {
		x := c.unary(u.Neg)
		if x.num != nil {
			return numOp(-*x.num)
		}
		return c.apply(u.Pos, "neg", []operand{x}, nil)
	}
	return c.primary(u.Prim)
}

func (c *Checker) primary(p *Primary) operand {
	switch {
	case p.Number != nil:
		f, err := strconv.ParseFloat(*p.Number, 64)
		if err != nil {
			c.errorf(p.Pos, "bad number %s", *p.Number)
			return operand{bad: true}
		}
		return numOp(f)
	case p.String != nil:
		return operand{str: p.String}
	case p.Placement != nil:
		return operand{placement: p.Placement}
	case p.Call != nil:
		return c.call(p.Call)
	case p.Name != nil:
		return c.lookup(p.Pos, *p.Name)
	case p.Paren != nil:
		return c.expr(p.Paren)
	}
	c.errorf(p.Pos, "empty expression")
	return operand{bad: true}
}

func (c *Checker) lookup(pos Pos, name string) operand {
	if i, ok := c.loopVars[name]; ok {
		return numOp(float64(i))
	}
	if c.scope != nil {
		if op, ok := c.scope[name]; ok {
			return op
		}
	}
	if c.local != "" {
		if _, ok := c.globals[name]; ok {
			c.errorf(pos, "local function %s sees only its arguments: pass %s as an argument with its placement", c.local, name)
			return operand{bad: true}
		}
	}
	if op, ok := c.override[name]; ok {
		return op
	}
	if v, ok := c.globals[name]; ok {
		return operand{v: v}
	}
	if c.broken[name] {
		return operand{bad: true}
	}
	c.errorf(pos, "unknown name %q%s", name, didYouMean(name, c.names()))
	return operand{bad: true}
}

func (c *Checker) binary(pos Pos, name string, a, b operand) operand {
	if a.bad || b.bad {
		return operand{bad: true}
	}
	if a.num != nil && b.num != nil && name != "matmul" {
		x, y := *a.num, *b.num
		switch name {
		case "add":
			return numOp(x + y)
		case "sub":
			return numOp(x - y)
		case "mul":
			return numOp(x * y)
		case "div":
			return numOp(x / y)
		}
	}
	return c.apply(pos, name, []operand{a, b}, nil)
}

func (c *Checker) call(call *Call) operand {
	if call.Module == "" && isLocalCall(call.Name) {
		return c.localCall(call)
	}
	if call.Module == "" && call.Name == "size" {
		return c.sizeCall(call)
	}
	if op, ok := c.numberCall(call); ok {
		return op
	}
	var args []operand
	local := c.localDef(call) != nil
	kw := map[string]operand{}
	for _, a := range call.Args {
		if local && a.Name != "" {
			continue // an axis parameter, bound by expandLocal
		}
		op := c.expr(a.Value)
		if a.Name != "" {
			if _, dup := kw[a.Name]; dup {
				c.errorf(a.Pos, "argument %s given twice", a.Name)
				return operand{bad: true}
			}
			kw[a.Name] = op
			continue
		}
		if len(kw) > 0 {
			c.errorf(a.Pos, "positional argument after keyword arguments")
			return operand{bad: true}
		}
		args = append(args, op)
	}
	for _, a := range args {
		if a.bad {
			return operand{bad: true}
		}
	}
	for _, a := range kw {
		if a.bad {
			return operand{bad: true}
		}
	}
	if call.Module != "" {
		mod, ok := c.modules[call.Module]
		if !ok && c.broken[brokenUse+call.Module] {
			return operand{bad: true}
		}
		if !ok {
			c.errorf(call.Pos, "unknown module %q (add `use %s`)", call.Module, call.Module)
			return operand{bad: true}
		}
		def, ok := mod[call.Name]
		if !ok {
			var names []string
			for n := range mod {
				names = append(names, n)
			}
			c.errorf(call.Pos, "module %s has no function %q%s", call.Module, call.Name, didYouMean(call.Name, names))
			return operand{bad: true}
		}
		if def.Local {
			return c.expandLocal(call, def, call.Module+"."+call.Name, args)
		}
		return c.expand(call, def, call.Module+"."+call.Name, args, kw)
	}
	if def, ok := c.modules[c.module][call.Name]; ok && c.module != "" {
		// a library function calls its module's other functions by name
		call = &Call{Pos: call.Pos, Module: c.module, Name: call.Name, Args: call.Args}
		if def.Local {
			return c.expandLocal(call, def, c.module+"."+call.Name, args)
		}
		return c.expand(call, def, c.module+"."+call.Name, args, kw)
	}
	if def, ok := c.funcs[call.Name]; ok {
		if def.Local {
			return c.expandLocal(call, def, call.Name, args)
		}
		return c.expand(call, def, call.Name, args, kw)
	}
	if insertedOnly[call.Name] {
		c.errorf(call.Pos, "%s is inserted by the compiler at a local function's boundary; it cannot be called", call.Name)
		return operand{bad: true}
	}
	if isBuiltin(call.Name) {
		return c.apply(call.Pos, call.Name, args, kw)
	}
	names := builtinNames()
	for n := range c.funcs {
		names = append(names, n)
	}
	c.errorf(call.Pos, "unknown function %q%s", call.Name, didYouMean(call.Name, names))
	return operand{bad: true}
}

// localDef is the local function a call names, or nil.
func (c *Checker) localDef(call *Call) *FuncDef {
	if def := c.modules[c.module][call.Name]; call.Module == "" && c.module != "" && def != nil {
		if def.Local {
			return def
		}
		return nil
	}
	if call.Module != "" {
		if def := c.modules[call.Module][call.Name]; def != nil && def.Local {
			return def
		}
		return nil
	}
	if def := c.funcs[call.Name]; def != nil && def.Local {
		return def
	}
	return nil
}

// expand inlines a user function: its body runs in a fresh scope that sees
// the parameters and the top-level names, and every value it creates
// remembers the call site.
func (c *Checker) expand(call *Call, def *FuncDef, name string, args []operand, kw map[string]operand) operand {
	if len(kw) > 0 {
		c.errorf(call.Pos, "%s takes no keyword arguments", name)
		return operand{bad: true}
	}
	if len(args) != len(def.Params) {
		c.errorf(call.Pos, "%s takes %s, got %d", name, plural(len(def.Params), "argument"), len(args))
		return operand{bad: true}
	}
	if len(c.calls) >= maxCallDepth {
		c.errorf(call.Pos, "calls nested deeper than %d (recursion is not supported)", maxCallDepth)
		return operand{bad: true}
	}
	saveScope, saveFn, saveRet, saveModule := c.scope, c.fn, c.ret, c.module
	c.module, _, _ = strings.Cut(name, ".")
	if !strings.Contains(name, ".") {
		c.module = ""
	}
	c.scope = map[string]operand{}
	for i, p := range def.Params {
		c.scope[p.Name] = args[i]
	}
	c.fn, c.ret = name, nil
	c.calls = append(c.calls, call.Pos)
	if def.Checkpoint {
		c.remat++
		defer func() { c.remat-- }()
	}
	nerr := len(c.errs)
	for _, s := range def.Body {
		c.stmt(s)
		if c.ret != nil {
			break
		}
	}
	ret := c.ret
	c.calls = c.calls[:len(c.calls)-1]
	c.scope, c.fn, c.ret, c.module = saveScope, saveFn, saveRet, saveModule
	if ret == nil {
		if len(c.errs) == nerr {
			c.errorf(call.Pos, "%s returns no value", name)
		}
		return operand{bad: true}
	}
	if len(c.errs) > nerr {
		return operand{bad: true}
	}
	if def.Checkpoint && ret.v != nil && c.remat == 1 {
		// the function's result is the checkpoint: kept, not recomputed
		c.touch(ret.v)
		ret.v.Remat = false
	}
	return *ret
}
