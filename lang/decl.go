package lang

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/sbp"
)

// Declarations: input and param statements, their types, placements and
// initialisers (including the .npy header checks of load).

func (c *Checker) tensorDecl(d *TensorDecl) {
	if c.scope != nil {
		c.errorf(d.Pos, "%s declarations belong at top level", d.Kind)
		return
	}
	if !c.checkNewName(d.Pos, d.Name) {
		return
	}
	if old, ok := c.globals[d.Name]; ok {
		c.errorf(d.Pos, "%s is already defined at %s", d.Name, FormatPos(old.Pos))
		return
	}
	// From here a failure leaves the name undefined: its uses are followers
	// of the error reported here and stay quiet.
	done := false
	defer func() {
		if !done {
			c.broken[d.Name] = true
		}
	}()
	if c.g.Mesh == nil {
		if !c.broken[brokenMesh] {
			// once: the later declarations lack the same mesh
			c.errorf(d.Pos, "declare a mesh before %s %s", d.Kind, d.Name)
			c.broken[brokenMesh] = true
		}
		return
	}
	t, ok := c.typeExpr(d.Type)
	if !ok {
		return
	}
	v := &Value{Op: d.Kind, Type: t, Name: d.Name, Pos: d.Pos}
	v.Declared = sbp.Broadcasts(c.g.Mesh.NumAxes())
	if d.Placement != nil {
		p, ok := c.placement(d.Placement, t)
		if !ok {
			return
		}
		v.Declared = p
	}
	init, ok := c.init(d, t)
	if !ok {
		return
	}
	v.Attrs.Init = init
	if invalid(c.add(v)) {
		return
	}
	c.globals[d.Name] = v
	delete(c.broken, d.Name)
	done = true
}

func (c *Checker) typeExpr(te *TypeExpr) (Type, bool) {
	dt, ok := ParseDType(te.DType)
	if !ok {
		c.errorf(te.Pos, "unknown dtype %q (want f32, f64, bf16, f16, i32 or i64)", te.DType)
		return Type{}, false
	}
	for _, d := range te.Dims {
		if d < 1 || d > 1<<30 {
			c.errorf(te.Pos, "dimension %d out of range (want 1 to 2^30)", d)
			return Type{}, false
		}
	}
	t := Type{DType: dt, Shape: append([]int{}, te.Dims...)}
	if !t.Sized() {
		c.errorf(te.Pos, "tensor of shape %s is too large (more than 2^40 elements)", ShapeString(t.Shape))
		return Type{}, false
	}
	return t, true
}

// placement resolves a placement literal against the mesh and a tensor type.
func (c *Checker) placement(lit *PlacementLit, t Type) (sbp.NdSBP, bool) {
	m := c.g.Mesh
	if m == nil {
		if !c.broken[brokenMesh] {
			c.errorf(lit.Pos, "a placement needs a mesh; declare one first")
		}
		return nil, false
	}
	out := sbp.Broadcasts(m.NumAxes())
	named := len(lit.Entries) > 0 && lit.Entries[0].Axis != ""
	if !named && len(lit.Entries) != m.NumAxes() {
		hint := ""
		if pp := c.g.Pipeline; pp != nil {
			hint = fmt.Sprintf(" (placements leave out the pipeline axis %s)", pp.Full.Axes[pp.Axis].Name)
		}
		c.errorf(lit.Pos, "placement has %d entries but mesh %s has %d axes %s%s", len(lit.Entries), m.Name, m.NumAxes(), m, hint)
		return nil, false
	}
	seen := map[int]bool{}
	for i, e := range lit.Entries {
		if (e.Axis != "") != named {
			c.errorf(e.Pos, "mix of named and positional placement entries")
			return nil, false
		}
		axis := i
		if named {
			axis = c.axisIndex(e.Axis)
			if axis < 0 {
				var names []string
				for _, a := range m.Axes {
					names = append(names, a.Name)
				}
				c.errorf(e.Pos, "unknown mesh axis %q%s", e.Axis, didYouMean(e.Axis, names))
				return nil, false
			}
			if seen[axis] {
				c.errorf(e.Pos, "mesh axis %s is placed twice", e.Axis)
				return nil, false
			}
			seen[axis] = true
		}
		s, ok := c.sbpEntry(e, t)
		if !ok {
			return nil, false
		}
		out[axis] = s
	}
	if out.MixedPartial() {
		c.errorf(lit.Pos, "%s mixes P(sum) and P(max): a value partial by both has no defined meaning (reduce one first, e.g. to(x, {B, P}))", out)
		return nil, false
	}
	return out, true
}

func (c *Checker) sbpEntry(e *PlacementEntry, t Type) (sbp.SBP, bool) {
	switch e.Kind {
	case "S":
		if e.Arg == nil {
			c.errorf(e.Pos, "S needs a dim: S(i)")
			return sbp.SBP{}, false
		}
		d, err := strconv.Atoi(*e.Arg)
		if err != nil {
			c.errorf(e.Pos, "S(%s): the split dim must be an integer", *e.Arg)
			return sbp.SBP{}, false
		}
		if d >= t.Rank() {
			c.errorf(e.Pos, "S(%d) splits dim %d but the tensor has rank %d", d, d, t.Rank())
			return sbp.SBP{}, false
		}
		return sbp.S(d), true
	case "B":
		if e.Arg != nil {
			c.errorf(e.Pos, "B takes no argument")
			return sbp.SBP{}, false
		}
		return sbp.B, true
	case "P":
		if t.DType.IsInt() {
			c.errorf(e.Pos, "integer tensors cannot be partial")
			return sbp.SBP{}, false
		}
		if e.Arg == nil || *e.Arg == "sum" {
			return sbp.P, true
		}
		if *e.Arg == "max" {
			return sbp.PMax, true
		}
		c.errorf(e.Pos, "P(%s): want P, P(sum) or P(max)", *e.Arg)
		return sbp.SBP{}, false
	}
	c.errorf(e.Pos, "unknown placement %q (want S(i), B or P)", e.Kind)
	return sbp.SBP{}, false
}

func (c *Checker) init(d *TensorDecl, t Type) (*Init, bool) {
	if d.Init == nil {
		c.errorf(d.Pos, "%s %s needs an initialiser (normal, uniform, zeros, ones or load)", d.Kind, d.Name)
		return nil, false
	}
	pos := d.Init.Pos
	call, name := initCall(d.Init)
	if name != "" {
		switch name {
		case "zeros", "ones":
			return &Init{Kind: name}, true
		case "causal":
			r := t.Rank()
			if r < 2 || t.Shape[r-1] != t.Shape[r-2] || !t.DType.IsFloat() {
				c.errorf(pos, "causal initialises float tensors whose last two dims are equal ([T, T])")
				return nil, false
			}
			return &Init{Kind: "causal", A: float64(t.Shape[r-1])}, true
		}
		c.errorf(pos, "unknown initialiser %q (want normal, uniform, zeros, ones, causal or load)", name)
		return nil, false
	}
	if call == nil || call.Module != "" {
		c.errorf(pos, "an initialiser must be normal(mean, std), uniform(lo, hi), zeros, ones or load(\"file.npy\")")
		return nil, false
	}
	nums := func(n int) ([]float64, bool) {
		if len(call.Args) != n {
			c.errorf(call.Pos, "%s takes %d arguments, got %d", call.Name, n, len(call.Args))
			return nil, false
		}
		var out []float64
		for _, a := range call.Args {
			op := c.expr(a.Value)
			if op.num == nil {
				if !op.bad {
					c.errorf(a.Pos, "%s takes numbers", call.Name)
				}
				return nil, false
			}
			out = append(out, *op.num)
		}
		return out, true
	}
	switch call.Name {
	case "normal", "uniform":
		if t.DType.IsInt() && call.Name == "normal" {
			c.errorf(call.Pos, "normal initialises float tensors only (uniform(lo, hi) draws integers in [lo, hi))")
			return nil, false
		}
		a, ok := nums(2)
		if !ok {
			return nil, false
		}
		if call.Name == "normal" && a[1] < 0 {
			c.errorf(call.Pos, "normal: std must be >= 0")
			return nil, false
		}
		return &Init{Kind: call.Name, A: a[0], B: a[1]}, true
	case "zeros", "ones":
		if len(call.Args) != 0 {
			c.errorf(call.Pos, "%s takes no arguments", call.Name)
			return nil, false
		}
		return &Init{Kind: call.Name}, true
	case "load":
		if len(call.Args) != 1 {
			c.errorf(call.Pos, "load takes one file name")
			return nil, false
		}
		op := c.expr(call.Args[0].Value)
		if op.str == nil {
			c.errorf(call.Args[0].Pos, "load takes a file name in quotes")
			return nil, false
		}
		return c.loadInit(call.Args[0].Pos, *op.str, d.Name, t)
	}
	c.errorf(call.Pos, "unknown initialiser %q (want normal, uniform, zeros, ones or load)", call.Name)
	return nil, false
}

func initCall(e *Expr) (*Call, string) {
	if len(e.Ops) != 0 || len(e.Left.Ops) != 0 || e.Left.Left.Prim == nil {
		return nil, ""
	}
	p := e.Left.Left.Prim
	if p.Name != nil {
		return nil, *p.Name
	}
	return p.Call, ""
}

func (c *Checker) loadInit(pos Pos, file, name string, t Type) (*Init, bool) {
	path := file
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.opts.Dir, file)
	}
	if filepath.Ext(path) != ".npy" {
		c.errorf(pos, "load(%q): only .npy files can be loaded", file)
		return nil, false
	}
	h, err := npy.ReadFileHeader(path)
	if err != nil {
		if os.IsNotExist(err) {
			c.errorf(pos, "load(%q): no such file", file)
		} else {
			c.errorf(pos, "load(%q): %v", file, err)
		}
		return nil, false
	}
	if h.DType() != t.DType.String() {
		c.errorf(pos, "load(%q): file holds %s but %s is declared %s", file, h.DType(), name, t.DType)
		return nil, false
	}
	if !slices.Equal(h.Shape, t.Shape) {
		c.errorf(pos, "load(%q): file has shape %s but %s is declared %s", file, ShapeString(h.Shape), name, ShapeString(t.Shape))
		return nil, false
	}
	return &Init{Kind: "load", Path: path, Src: file}, true
}
