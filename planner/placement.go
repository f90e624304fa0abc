package planner

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/lang"
)

// Parameter placements. The search keeps each parameter's declared
// placement; Refine then tries, on the best strategy, the other
// placements of each parameter role — parameters whose names differ only
// in digits (Wq0 … Wq95), which take the same placement — one mesh axis
// at a time: every S(d) of the parameter's dims and B on each axis other
// than the data axis (which ZeRO, not the declaration, shards). It keeps
// a change when the priced step falls and the peak still fits, and
// passes over the roles until no change helps: coordinate descent, a
// local optimum, not an exhaustive search over placements.

// paramDecl is a parameter declared with a positional placement.
type paramDecl struct {
	name, role string
	rank       int
	entries    []string // one per declared axis, as written (pipeline axis excluded)
	sp         span     // the placement literal, braces included
}

func (p *Program) param(t *lang.TensorDecl) {
	if t.Kind != "param" || t.Placement == nil {
		return
	}
	var entries []string
	for _, e := range t.Placement.Entries {
		if e.Axis != "" {
			return // named entries: left as written
		}
		s := e.Kind
		if e.Arg != nil {
			s += "(" + *e.Arg + ")"
		}
		entries = append(entries, s)
	}
	start := t.Placement.Pos.Offset
	end := bytes.IndexByte(p.Src[start:], '}')
	if end < 0 {
		return
	}
	role := strings.TrimRight(t.Name, "0123456789")
	if role == "" {
		role = t.Name
	}
	p.params = append(p.params, paramDecl{name: t.Name, role: role, rank: len(t.Type.Dims), entries: entries, sp: span{start, start + end + 1}})
}

// roles lists the parameter roles whose members are declared alike, in
// order of first declaration; a role whose members differ is split into
// its parameters.
func (p *Program) roles() []string {
	var out []string
	first := map[string]*paramDecl{}
	mixed := map[string]bool{}
	for i := range p.params {
		d := &p.params[i]
		if f, ok := first[d.role]; !ok {
			first[d.role] = d
			out = append(out, d.role)
		} else if f.rank != d.rank || !slices.Equal(f.entries, d.entries) {
			mixed[d.role] = true
		}
	}
	var roles []string
	for _, r := range out {
		if !mixed[r] {
			roles = append(roles, r)
			continue
		}
		for _, d := range p.params {
			if d.role == r {
				roles = append(roles, d.name)
			}
		}
	}
	return roles
}

// members are the parameters of a role (or the one parameter it names).
func (p *Program) members(role string) []*paramDecl {
	var out []*paramDecl
	for i := range p.params {
		if d := &p.params[i]; d.role == role || d.name == role {
			out = append(out, d)
		}
	}
	return out
}

// placementEdits rewrites the placements c overrides.
func (p *Program) placementEdits(c *Candidate) []edit {
	var eds []edit
	for _, d := range p.params {
		if pl, ok := c.Place[d.role]; ok {
			eds = append(eds, edit{d.sp, pl})
		} else if pl, ok := c.Place[d.name]; ok {
			eds = append(eds, edit{d.sp, pl})
		}
	}
	return eds
}

// alternatives are the placements one axis away from entries.
func alternatives(entries []string, rank, dataAxis int) []string {
	var out []string
	for a := range entries {
		if a == dataAxis {
			continue
		}
		opts := []string{"B"}
		for d := 0; d < rank; d++ {
			opts = append(opts, fmt.Sprintf("S(%d)", d))
		}
		for _, o := range opts {
			if o == entries[a] {
				continue
			}
			e := slices.Clone(entries)
			e[a] = o
			out = append(out, "{"+strings.Join(e, ", ")+"}")
		}
	}
	return out
}

// Refinement is what Refine changed.
type Refinement struct {
	Best    *Evaluated
	Changes []string // "Wout {B, S(1)} → {B, B}: 81 µs → 75 µs"
	Priced  int
}

// Refine searches the parameters' placements around the best strategy of
// r (see the comment at the top of this file).
func Refine(r *Result) *Refinement {
	if len(r.Ranked) == 0 {
		return nil
	}
	p, opts := r.Prog, r.Opts
	ref := &Refinement{Best: r.Ranked[0]}
	data := r.base.dataAxis
	for improved := true; improved; {
		improved = false
		for _, role := range p.roles() {
			ms := p.members(role)
			cur := ms[0].entries
			if pl, ok := ref.Best.Cand.Place[role]; ok {
				cur = splitEntries(pl)
			}
			var tries []*Evaluated
			for _, alt := range alternatives(cur, ms[0].rank, data) {
				c := *ref.Best.Cand
				c.Place = map[string]string{}
				for k, v := range ref.Best.Cand.Place {
					c.Place[k] = v
				}
				c.Place[role] = alt
				ref.Priced++
				e, err := evaluate(p, &c, opts, r.base.dataName(p))
				if err == nil && e.Fits {
					tries = append(tries, e)
				}
			}
			sort.SliceStable(tries, func(i, j int) bool { return better(tries[i], tries[j]) })
			if len(tries) > 0 && tries[0].Cost.Step < ref.Best.Cost.Step {
				ref.Changes = append(ref.Changes, fmt.Sprintf("%s {%s} → %s: step %s → %s", role, strings.Join(cur, ", "),
					tries[0].Cand.Place[role], seconds(ref.Best.Cost.Step), seconds(tries[0].Cost.Step)))
				ref.Best = tries[0]
				improved = true
			}
		}
	}
	return ref
}

func splitEntries(pl string) []string {
	pl = strings.TrimSuffix(strings.TrimPrefix(pl, "{"), "}")
	out := strings.Split(pl, ", ")
	return out
}

// Text reports the refinement.
func (ref *Refinement) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nparameter placements around the best (coordinate descent over roles, %d priced):\n", ref.Priced)
	if len(ref.Changes) == 0 {
		b.WriteString("  no other placement of any parameter role is faster\n")
	}
	for _, c := range ref.Changes {
		b.WriteString("  " + c + "\n")
	}
	if len(ref.Changes) > 0 {
		b.WriteString(table([]*Evaluated{ref.Best}))
	}
	return b.String()
}
