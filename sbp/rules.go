package sbp

import (
	"fmt"
	"slices"
	"sort"

	"github.com/meshrun/meshrun/mesh"
)

// OpDesc is what a rule needs to know about one use of an op: the global
// input and output shapes and the op's attributes.
type OpDesc struct {
	Op    string
	In    [][]int
	Out   []int
	Axis  int   // reductions, softmax, concat, slice: the dim operated on; -1 = all dims
	Perm  []int // transpose: out dim i is input dim Perm[i]
	NumIn int
}

// Sig is a one-axis signature: placements of the inputs and the output.
type Sig struct {
	In  []SBP
	Out SBP
	Why string // a one-line reason, shown by explain
}

// NdSig is a signature over the whole mesh.
type NdSig struct {
	In  []NdSBP
	Out NdSBP
	Why []string // per mesh axis
}

// newNdSig is a signature of ins inputs on a mesh of n axes.
func newNdSig(ins, n int) NdSig {
	s := NdSig{In: make([]NdSBP, ins), Out: make(NdSBP, n), Why: make([]string, n)}
	for i := range s.In {
		s.In[i] = make(NdSBP, n)
	}
	return s
}

// clone copies s into one allocation of placements shared by its inputs
// and output (each its own subslice).
func (s NdSig) clone() NdSig {
	n := len(s.Out)
	all := make([]SBP, 0, n*(len(s.In)+1))
	c := NdSig{In: make([]NdSBP, len(s.In)), Why: slices.Clone(s.Why)}
	for i, in := range s.In {
		all = append(all, in...)
		c.In[i] = all[i*n : (i+1)*n : (i+1)*n]
	}
	all = append(all, s.Out...)
	c.Out = all[len(s.In)*n : len(all) : len(all)]
	return c
}

// Rule is the placement rule of one op: the one-axis signatures it accepts,
// and optionally a check that an nd combination of them is valid (for ops
// whose validity depends on how several axes split one dim together).
type Rule struct {
	Family string
	Sigs   func(d *OpDesc) []Sig
	NdOK   func(d *OpDesc, m *mesh.Mesh, s NdSig) bool // s is scratch NdSigs reuses: not to be kept
}

var rules = map[string]*Rule{}

// Register adds the placement rule of ops; package ops calls it, once per
// op, from the file of the op's family (the table stays here so that
// inference and boxing look rules up without knowing the rest of an op).
func Register(family string, r Rule, ops ...string) {
	for _, op := range ops {
		if _, dup := rules[op]; dup {
			panic("sbp: duplicate rule for " + op)
		}
		rr := r
		rr.Family = family
		rules[op] = &rr
	}
}

// Lookup returns the rule of an op.
func Lookup(op string) (*Rule, bool) {
	r, ok := rules[op]
	return r, ok
}

// Ops lists every op with a rule, sorted.
func Ops() []string {
	var out []string
	for op := range rules {
		out = append(out, op)
	}
	sort.Strings(out)
	return out
}

// NdSigs enumerates the nd signatures of an op on mesh m: every combination
// of one-axis signatures, filtered by the rule's nd check. The order is
// deterministic (axis 0 varies slowest, each axis in rule order).
func NdSigs(r *Rule, d *OpDesc, m *mesh.Mesh) ([]NdSig, error) {
	one := r.Sigs(d)
	if len(one) == 0 {
		return nil, fmt.Errorf("no placement rule for %s with these shapes", d.Op)
	}
	n := m.NumAxes()
	var out []NdSig
	idx := make([]int, n)
	// Each combination is built in one scratch signature and copied only
	// when accepted: most are rejected, and allocating each one dominated
	// placement inference on a deep model.
	s := newNdSig(len(d.In), n)
	for {
		for a := 0; a < n; a++ {
			sig := one[idx[a]]
			for i := range s.In {
				s.In[i][a] = sig.In[i]
			}
			s.Out[a] = sig.Out
			s.Why[a] = sig.Why
		}
		if r.NdOK == nil || r.NdOK(d, m, s) {
			out = append(out, s.clone())
		}
		a := n - 1
		for ; a >= 0; a-- {
			idx[a]++
			if idx[a] < len(one) {
				break
			}
			idx[a] = 0
		}
		if a < 0 {
			break
		}
	}
	return out, nil
}
