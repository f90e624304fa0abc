package lower

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/sbp"
)

// checkGraph is the first pass: it re-checks the structure of the graph it
// is given (which need not come from lang.Check — tests and tools build
// graphs too): values in order with arguments before their users, sources
// with an initialiser, declared placements that fit the mesh and the
// tensor, outputs from this graph, and a placement rule for every op. Every
// missing rule is reported at its op's position, all at once. A value's
// ID is its index in the graph (as ir.Builder numbers them), which the
// passes' tables by ID rely on.
func checkGraph(p *Plan) error {
	g := p.Graph
	n := p.Mesh.NumAxes()
	var errs lang.ErrorList
	bad := func(v *ir.Value, format string, args ...any) {
		errs = append(errs, &ir.Error{Pos: v.Pos, Msg: fmt.Sprintf(format, args...)})
	}
	for i, v := range g.Values {
		if v.ID != i {
			bad(v, "internal: %s has ID %d at index %d", v.Label(), v.ID, i)
			continue
		}
		for _, a := range v.Args {
			if !defined(g, a, i) {
				bad(v, "internal: %s uses %s before it is defined", v.Label(), a.Label())
			}
		}
		if v.Declared != nil && !fits(v.Declared, v.Type, n) {
			bad(v, "placement %s does not fit %s on a %d-axis mesh", v.Declared, v.Type, n)
		}
		switch {
		case v.IsSource():
			if v.Attrs.Init == nil {
				bad(v, "internal: %s %s has no initialiser", v.Op, v.Label())
			}
		case v.Op == "to":
			if v.Declared == nil || len(v.Args) != 1 {
				bad(v, "internal: to() without a placement")
			}
		case isLocalOp(v):
		default:
			if _, ok := sbp.Lookup(v.Op); !ok {
				bad(v, "op %s has no placement rule (this is a missing rule in package sbp)", v.Op)
			}
		}
	}
	for _, o := range g.Outputs {
		if !defined(g, o.Value, len(g.Values)) {
			errs = append(errs, &ir.Error{Pos: o.Pos, Msg: "internal: output " + o.Name + " is not a value of this graph"})
		}
		if o.Placement != nil && !fits(o.Placement, o.Value.Type, n) {
			errs = append(errs, &ir.Error{Pos: o.Pos, Msg: fmt.Sprintf("placement %s does not fit output %s", o.Placement, o.Name)})
		}
	}
	if len(errs) > 0 {
		return errs.Sort()
	}
	p.Values = live(g, p.Opts.KeepDead)
	return nil
}

// defined reports whether a is one of g's values before index i.
func defined(g *ir.Graph, a *ir.Value, i int) bool {
	return a != nil && a.ID >= 0 && a.ID < i && g.Values[a.ID] == a
}

// live lists the values the outputs depend on, in program order (marked
// by ID: checkGraph has checked that IDs are indices).
func live(g *ir.Graph, all bool) []*ir.Value {
	if all {
		return g.Values
	}
	need := make([]bool, len(g.Values))
	for _, o := range g.Outputs {
		need[o.Value.ID] = true
	}
	if g.Train != nil {
		for _, c := range g.Train.Carry {
			need[c.Next.ID] = true
		}
	}
	n := 0
	for i := len(g.Values) - 1; i >= 0; i-- {
		if need[i] {
			n++
			for _, a := range g.Values[i].Args {
				need[a.ID] = true
			}
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]*ir.Value, 0, n)
	for i, v := range g.Values {
		if need[i] {
			out = append(out, v)
		}
	}
	return out
}

func fits(pl sbp.NdSBP, t ir.Type, axes int) bool {
	if len(pl) != axes {
		return false
	}
	for _, e := range pl {
		if e.IsS() && e.Dim >= t.Rank() {
			return false
		}
		if e.IsP() && t.DType.IsInt() {
			return false
		}
	}
	return true
}
