package ops

import (
	"fmt"

	"github.com/meshrun/meshrun/mesh"
)

// Shape ops move data without arithmetic, so partial values pass through all
// of them. transpose: output dim i is input dim Perm[i], so S(Perm[i]) → S(i).
// concat and slice along Axis keep splits on every other dim. reshape keeps a
// split only where it provably maps to a split of the output (see reshapeSigs).

func init() {
	register("shape", Rule{Sigs: transposeSigs}, "transpose")
	register("shape", Rule{Sigs: alongAxisSigs}, "concat", "slice")
	register("shape", Rule{Sigs: reshapeSigs, NdOK: reshapeNdOK}, "reshape")
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
