package lang

import (
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// The local view. A `local def` is written per device, as in MPI or
// JAX's shard_map: its body sees each argument as the device's block under
// the placement the parameter declares, asks for its coordinate with
// axis_index, and moves data only by the collectives it writes. In the
// global program a call is one value whose placement is the declared
// result placement, so the rest of the program (inference, boxing,
// autodiff, training) treats it like any op.
//
// A call expands into to_local(arg) for every argument (the compiler first
// converts the argument to the declared placement), the body on local
// values, and from_local(result). Local values are marked Local; their
// type is one device's block.
//
// Autodiff needs to know, for every local value, the axes along which the
// devices' blocks may differ (Value.Vary), as JAX's shard_map tracks:
// along the others every device holds the same block, and its gradient is
// the same everywhere too and stands for the derivative of that one value.
// That makes every transpose exact and as cheap as the hand-written
// backward passes: all_reduce (whose result no longer varies) passes the
// gradient back unchanged, and where a value that does not vary meets one
// that does, an identity pvary is inserted whose gradient is summed over
// those axes — Megatron's f and g operators fall out of this rule. A result
// declared B along an axis must be the same on its devices: not varying
// there, or known equal (Value.Equal: an all_gather's or a broadcast's
// result and what ops keep of it), which is taken as the mean of equal
// copies (equal_copies) with its gradient split evenly; anything else is
// a compile error.

// localCalls are the local view's built-in calls.
var localCalls = map[string]bool{"all_reduce": true, "all_gather": true, "reduce_scatter": true, "all_to_all": true,
	"broadcast": true, "reduce": true, "shift": true, "axis_index": true, "axis_size": true, "arange": true, "pvary": true}

func isLocalCall(name string) bool { return localCalls[name] }

// insertedOnly are the local view's ops only the checker makes.
var insertedOnly = map[string]bool{"to_local": true, "from_local": true, "equal_copies": true}

// axisIndex resolves a mesh axis name: a local function's axis parameter
// (bound by its call: f(x, r=dp)) or an axis of the mesh.
func (c *Checker) axisIndex(name string) int {
	if a, ok := c.axisAlias[name]; ok {
		c.aliasUsed[name] = true
		return a
	}
	return c.g.Mesh.AxisIndex(name)
}

// axisArgs binds a local function's axis parameters: each keyword of its
// call names a mesh axis (summa(X, W, r=dp, c=tp)); the function's
// placements and collectives then say r and c.
func (c *Checker) axisArgs(call *Call) (map[string]int, bool) {
	alias := map[string]int{}
	for _, a := range call.Args {
		if a.Name == "" {
			continue
		}
		name, ok := bareIdent(a.Value)
		if !ok || c.g.Mesh.AxisIndex(name) < 0 {
			c.errorf(a.Pos, "%s=...: a local function's keyword arguments name mesh axes of %s %s", a.Name, c.g.Mesh.Name, c.g.Mesh)
			return nil, false
		}
		if _, dup := alias[a.Name]; dup {
			c.errorf(a.Pos, "argument %s given twice", a.Name)
			return nil, false
		}
		for other, ax := range alias {
			if ax == c.g.Mesh.AxisIndex(name) {
				c.errorf(a.Pos, "%s and %s are both bound to mesh axis %s: a function's axes are distinct", other, a.Name, name)
				return nil, false
			}
		}
		alias[a.Name] = c.g.Mesh.AxisIndex(name)
	}
	return alias, true
}

// axesBound reports, at the call, an axis a local function's placements
// name that is neither bound by the call nor an axis of the mesh.
func (c *Checker) axesBound(call *Call, def *FuncDef, name string, alias map[string]int) bool {
	lits := []*PlacementLit{def.Result}
	for _, p := range def.Params {
		lits = append(lits, p.Placement)
	}
	m := c.g.Mesh
	for _, lit := range lits {
		if lit == nil {
			continue
		}
		for _, e := range lit.Entries {
			if _, bound := alias[e.Axis]; e.Axis == "" || bound || m.AxisIndex(e.Axis) >= 0 {
				continue
			}
			c.errorf(call.Pos, "%s places its data on a mesh axis %s, which mesh %s %s does not have: bind it at the call, e.g. %s(..., %s=%s)",
				name, e.Axis, m.Name, m, name, e.Axis, m.Axes[0].Name)
			return false
		}
	}
	return true
}

// bodyErrorf reports an error inside a local function's body found after
// the body was expanded: it names the call as errors inside it do.
func (c *Checker) bodyErrorf(call, pos Pos, format string, args ...any) {
	c.calls = append(c.calls, call)
	c.errorf(pos, format, args...)
	c.calls = c.calls[:len(c.calls)-1]
}

// aliasesUsed reports a keyword of a local function's call that names no
// axis of the function (a typo would otherwise fall back to a mesh axis of
// the same name).
func (c *Checker) aliasesUsed(call *Call, name string) bool {
	for _, a := range call.Args {
		if a.Name != "" && !c.aliasUsed[a.Name] {
			c.errorf(a.Pos, "%s=...: %s names no mesh axis %s", a.Name, name, a.Name)
			return false
		}
	}
	return true
}

// placementText renders a placement literal as written.
func placementText(lit *PlacementLit) string {
	var es []string
	for _, e := range lit.Entries {
		s := e.Kind
		if e.Arg != nil {
			s += "(" + *e.Arg + ")"
		}
		if e.Axis != "" {
			s = e.Axis + ": " + s
		}
		es = append(es, s)
	}
	return "{" + strings.Join(es, ", ") + "}"
}

// checkDef checks what a function definition says about itself.
func (c *Checker) checkDef(d *FuncDef) bool {
	if d.Padded && !d.Local {
		c.errorf(d.Pos, "only a local function pads its blocks (write `local padded def %s`)", d.Name)
		return false
	}
	if !d.Local {
		for _, p := range d.Params {
			if p.Placement != nil {
				c.errorf(p.Placement.Pos, "only a local function declares its parameters' placements (write `local def %s`)", d.Name)
				return false
			}
		}
		if d.Result != nil {
			c.errorf(d.Result.Pos, "only a local function declares its result's placement (write `local def %s`)", d.Name)
			return false
		}
		return true
	}
	if d.Checkpoint {
		c.errorf(d.Pos, "a local function cannot be checkpointed")
		return false
	}
	return true
}

// expandLocal checks a call of a local function.
func (c *Checker) expandLocal(call *Call, def *FuncDef, name string, args []operand) operand {
	if c.local != "" {
		c.errorf(call.Pos, "local function %s cannot be called inside local function %s", name, c.local)
		return operand{bad: true}
	}
	if c.g.Mesh == nil {
		c.errorf(call.Pos, "a local function needs a mesh; declare one first")
		return operand{bad: true}
	}
	alias, ok := c.axisArgs(call)
	if !ok || !c.axesBound(call, def, name, alias) {
		return operand{bad: true}
	}
	c.axisAlias, c.aliasUsed = alias, map[string]bool{}
	defer func() { c.axisAlias, c.aliasUsed = nil, nil }()
	if len(args) != len(def.Params) {
		c.errorf(call.Pos, "%s takes %s, got %d", name, plural(len(def.Params), "argument"), len(args))
		return operand{bad: true}
	}
	locals, ok := c.enterLocal(call, def, name, args)
	if !ok {
		return operand{bad: true}
	}
	c.local = name
	ret := c.expand(call, def, name, locals, nil)
	c.local = ""
	if ret.bad {
		return ret
	}
	if ret.v == nil || !ret.v.Local {
		c.bodyErrorf(call.Pos, c.retPos, "local function %s must return a value computed from its arguments", name)
		return operand{bad: true}
	}
	out := sbp.Broadcasts(c.g.Mesh.NumAxes())
	if def.Result != nil {
		var ok bool
		if out, ok = c.placement(def.Result, ret.v.Type); !ok {
			return operand{bad: true}
		}
	}
	shape, ok := c.resultShape(call, def, name, args, ret.v, out)
	if !ok || !c.aliasesUsed(call, name) {
		return operand{bad: true}
	}
	return c.leaveLocal(call.Pos, name, ret, out, shape)
}

// enterLocal turns a local function's arguments into the body's blocks:
// each tensor converted to its parameter's placement (B by default) and
// seen through to_local; numbers pass unchanged.
func (c *Checker) enterLocal(call *Call, def *FuncDef, name string, args []operand) ([]operand, bool) {
	locals := make([]operand, len(args))
	for i, a := range args {
		if a.num != nil && def.Params[i].Placement == nil {
			locals[i] = a // a number: the same on every device
			continue
		}
		if a.v == nil && def.Params[i].Placement != nil {
			c.errorf(call.Pos, "argument %d of local function %s declares a placement %s: pass a tensor", i+1, name, placementText(def.Params[i].Placement))
			return nil, false
		}
		if a.v == nil {
			c.errorf(call.Pos, "argument %d of local function %s must be a tensor or a number", i+1, name)
			return nil, false
		}
		pl := sbp.Broadcasts(c.g.Mesh.NumAxes())
		if lit := def.Params[i].Placement; lit != nil {
			var ok bool
			if pl, ok = c.placement(lit, a.v.Type); !ok {
				return nil, false
			}
		}
		kw := map[string]operand{"place": {place: pl}}
		if def.Padded {
			kw["padded"] = numOp(1)
		}
		locals[i] = c.apply(call.Pos, "to_local", []operand{a}, kw)
		if locals[i].bad {
			return nil, false
		}
	}
	return locals, true
}

// resultShape is a local function's global result shape: its blocks
// joined, or for a padded function the shape it declares, evaluated with
// its parameters bound to the global arguments.
func (c *Checker) resultShape(call *Call, def *FuncDef, name string, args []operand, ret *Value, out sbp.NdSBP) ([]int, bool) {
	shape := slices.Clone(ret.Type.Shape)
	for d := range shape {
		shape[d] *= splitCount(out, d, c.g.Mesh.Axes)
	}
	if !def.Padded {
		return shape, true
	}
	if len(def.Shape) != len(shape) {
		pos := def.Pos
		if def.Result != nil {
			pos = def.Result.Pos
		}
		c.errorf(pos, "local padded function %s must give its result's shape after its placement, e.g. -> {...} [size(x, 0), size(w, 1)] (%d dims)", name, len(shape))
		return nil, false
	}
	save := c.scope
	c.scope = map[string]operand{}
	for i, p := range def.Params {
		c.scope[p.Name] = args[i]
	}
	defer func() { c.scope = save }()
	for d, e := range def.Shape {
		n := c.expr(e)
		if n.bad {
			return nil, false
		}
		if n.num == nil || *n.num != math.Trunc(*n.num) || *n.num < 1 || *n.num > float64(shape[d]) {
			c.bodyErrorf(call.Pos, e.Pos, "%s: the result's dim %d must be an integer from 1 to %d (the padded blocks' whole)", name, d, shape[d])
			return nil, false
		}
		shape[d] = int(*n.num)
	}
	return shape, true
}

// splitCount is how many blocks dim d is cut into by pl.
func splitCount(pl sbp.NdSBP, d int, axes []mesh.Axis) int {
	n := 1
	for a, s := range pl {
		if s.IsS() && s.Dim == d {
			n *= axes[a].Size
		}
	}
	return n
}

// leaveLocal turns the body's result into the declared global value: a
// result that must vary (S, P) but does not is made to (pvary), one
// declared B along axes it varies on is taken as equal copies.
func (c *Checker) leaveLocal(pos Pos, name string, ret operand, out sbp.NdSBP, shape []int) operand {
	var needVary, equal uint64
	for a, s := range out {
		bit := uint64(1) << a
		switch {
		case !s.IsB() && ret.v.Vary&bit == 0:
			needVary |= bit
		case s.IsB() && ret.v.Vary&bit != 0 && ret.v.Equal&bit == 0:
			c.bodyErrorf(pos, c.retPos, "the result of local function %s differs between the devices of %s, but the function declares it B there: all_reduce it, or declare it P or S",
				name, c.g.Mesh.Axes[a].Name)
			return operand{bad: true}
		case s.IsB() && ret.v.Vary&bit != 0:
			equal |= bit
		}
	}
	if needVary != 0 {
		ret = operand{v: c.pvary(pos, ret.v, needVary)}
	}
	if equal != 0 {
		ret = operand{v: c.mk(pos, "equal_copies", []operand{ret}, map[string]operand{"axes": {ints: axesOf(equal)}})}
	}
	return c.apply(pos, "from_local", []operand{ret}, map[string]operand{"place": {place: out}, "shape": {ints: shape}})
}

func axesOf(mask uint64) []int {
	var out []int
	for mask != 0 {
		a := bits.TrailingZeros64(mask)
		out = append(out, a)
		mask &^= 1 << a
	}
	return out
}

func maskOf(axes []int) uint64 {
	var m uint64
	for _, a := range axes {
		m |= 1 << a
	}
	return m
}

// localize marks v local when it is computed from local values and
// records the axes it varies along, inserting pvary where an argument that
// does not vary along some axis meets one that does. It reports false
// when v mixes local values with global ones (an error, reported).
func (c *Checker) localize(v *Value) bool {
	switch v.Op {
	case "to_local":
		v.Local = true
		for a, s := range v.Attrs.Place {
			if !s.IsB() {
				v.Vary |= 1 << a
			}
		}
		return true
	case "axis_index":
		v.Local, v.Vary = true, maskOf(v.Attrs.Axes)
		return true
	case "arange":
		v.Local = true
		return true
	case "from_local":
		return true
	}
	if !slices.ContainsFunc(v.Args, func(a *Value) bool { return a.Local }) {
		return true
	}
	var union uint64
	same := ^uint64(0) // axes along which every local argument is the same on every device
	for _, a := range v.Args {
		switch {
		case a.Local:
			union |= a.Vary
			same &= a.Equal | ^a.Vary
		case a.Op != "const" && a.Type.Rank() > 0:
			c.errorf(v.Pos, "%s mixes a local value with the global value %s", v.Op, a.Label())
			return false
		}
	}
	v.Local = true
	need, out := union, union
	group := maskOf(v.Attrs.Axes)
	switch v.Op {
	case "all_reduce":
		need, out = union|group, union&^group
	case "pvary": // equal along the axes it newly varies on, not along those it already did
		out, same = union|group, same|(group&^union)
	case "equal_copies":
		out = union &^ group
	case "all_gather", "broadcast":
		need, out, same = union|group, union|group, same|group
	case "reduce_scatter", "all_to_all", "reduce", "shift":
		need, out, same = union|group, union|group, same&^group
	}
	v.Equal = same & out
	for i, a := range v.Args {
		if a.Local && a.Vary != need {
			pv := c.pvary(v.Pos, a, need&^a.Vary)
			if invalid(pv) {
				return false
			}
			v.Args[i] = pv
		}
	}
	v.Vary = out
	return true
}

// pvary is x used where it varies along axes too: one pvary per value and
// axes, shared by all its uses, so that its transpose (the all-reduce of
// the gradient) runs once for all of them — SUMMA's W in a 2.5D body meets
// the depth axis at every step, and its gradient is summed over depth once.
func (c *Checker) pvary(pos Pos, x *Value, axes uint64) *Value {
	key := pvaryKey{x, axes}
	if pv, ok := c.pvaries[key]; ok && c.g.Has(pv) {
		return pv
	}
	pv := c.mk(pos, "pvary", []operand{{v: x}}, map[string]operand{"axes": {ints: axesOf(axes)}})
	if c.pvaries == nil {
		c.pvaries = map[pvaryKey]*Value{}
	}
	c.pvaries[key] = pv
	return pv
}

type pvaryKey struct {
	x    *Value
	axes uint64
}

// localCall checks a call of the local view's collectives and queries:
// the tensor first, then the mesh axes by name (all_gather(x, r, dim=0));
// shift takes its offsets as axis=offset (shift(x, r=1, c=-1)).
func (c *Checker) localCall(call *Call) operand {
	if c.local == "" {
		c.errorf(call.Pos, "%s belongs to the local view: call it inside a `local def`", call.Name)
		return operand{bad: true}
	}
	if call.Name == "arange" {
		var args []operand
		for _, a := range call.Args {
			if args = append(args, c.expr(a.Value)); args[len(args)-1].bad {
				return operand{bad: true}
			}
		}
		return c.apply(call.Pos, "arange", args, nil)
	}
	la, ok := c.localArgs(call)
	if !ok {
		return operand{bad: true}
	}
	m := c.g.Mesh
	if len(la.axes) == 0 {
		c.errorf(call.Pos, "%s needs at least one mesh axis of %s %s", call.Name, m.Name, m)
		return operand{bad: true}
	}
	kw := la.kw
	switch call.Name {
	case "axis_size":
		if len(la.axes) != 1 || len(kw) > 0 || la.x.v != nil {
			c.errorf(call.Pos, "axis_size takes one mesh axis")
			return operand{bad: true}
		}
		return numOp(float64(m.Axes[la.axes[0]].Size))
	case "axis_index":
		kw["axes"] = operand{ints: la.axes}
		return c.apply(call.Pos, call.Name, nil, kw)
	}
	if la.x.v == nil || !la.x.v.Local {
		c.errorf(call.Pos, "%s needs a local tensor (a value of the local function's body) as its first argument", call.Name)
		return operand{bad: true}
	}
	kw["axes"] = operand{ints: la.axes}
	if call.Name == "shift" {
		kw["by"] = operand{ints: la.offsets}
	}
	if r, ok := kw["root"]; ok && c.opts.SingleDevice && r.num != nil {
		// the single-device reference: every axis has one device, which is
		// every root (the program was checked with its real sizes)
		kw["root"] = numOp(0)
	}
	return c.apply(call.Pos, call.Name, []operand{la.x}, kw)
}

// localArgs are a local-view call's arguments: the tensor, the mesh axes
// (shift's with their offsets) and the other keywords.
type localArgs struct {
	x             operand
	axes, offsets []int
	kw            map[string]operand
}

func (c *Checker) localArgs(call *Call) (localArgs, bool) {
	la := localArgs{kw: map[string]operand{}}
	m := c.g.Mesh
	addAxis := func(pos Pos, name string) bool {
		if slices.Contains(la.axes, c.axisIndex(name)) {
			c.errorf(pos, "mesh axis %s named twice", name)
			return false
		}
		la.axes = append(la.axes, c.axisIndex(name))
		return true
	}
	for i, a := range call.Args {
		if a.Name == "" && (i > 0 || call.Name == "axis_index" || call.Name == "axis_size") {
			name, ok := bareIdent(a.Value)
			if !ok || c.axisIndex(name) < 0 {
				c.errorf(a.Pos, "%s: expected the name of a mesh axis of %s %s", call.Name, m.Name, m)
				return la, false
			}
			if !addAxis(a.Pos, name) {
				return la, false
			}
			continue
		}
		op := c.expr(a.Value)
		if op.bad {
			return la, false
		}
		switch {
		case a.Name != "" && call.Name == "shift" && c.axisIndex(a.Name) >= 0:
			if op.num == nil || *op.num != math.Trunc(*op.num) || math.Abs(*op.num) > 1<<20 {
				c.errorf(a.Pos, "shift: the offset along %s must be an integer", a.Name)
				return la, false
			}
			if !addAxis(a.Pos, a.Name) {
				return la, false
			}
			la.offsets = append(la.offsets, int(*op.num))
		case a.Name != "":
			la.kw[a.Name] = op
		default:
			la.x = op
		}
	}
	return la, true
}

// bareIdent reports an expression that is just a name.
func bareIdent(e *Expr) (string, bool) {
	if len(e.Ops) > 0 || len(e.Left.Ops) > 0 || e.Left.Left.Prim == nil || e.Left.Left.Prim.Name == nil {
		return "", false
	}
	return *e.Left.Left.Prim.Name, true
}

// sizeCall is size(x, axis): the length of a tensor's dim as a number (in
// a local function, of the device's block), so library functions can
// reshape whatever shapes they are given.
func (c *Checker) sizeCall(call *Call) operand {
	if len(call.Args) != 2 || call.Args[0].Name != "" || call.Args[1].Name != "" {
		c.errorf(call.Pos, "size takes a tensor and a dim: size(x, 0)")
		return operand{bad: true}
	}
	x, d := c.expr(call.Args[0].Value), c.expr(call.Args[1].Value)
	if x.bad || d.bad {
		return operand{bad: true}
	}
	if x.v == nil || d.num == nil || *d.num != math.Trunc(*d.num) {
		c.errorf(call.Pos, "size takes a tensor and an integer dim: size(x, 0)")
		return operand{bad: true}
	}
	r, i := x.v.Type.Rank(), int(*d.num)
	if i < -r || i >= r {
		c.errorf(call.Args[1].Pos, "size: dim %d out of range for rank %d", i, r)
		return operand{bad: true}
	}
	if i < 0 {
		i += r
	}
	return numOp(float64(x.v.Type.Shape[i]))
}
