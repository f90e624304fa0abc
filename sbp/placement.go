// Package sbp holds placements (OneFlow's split/broadcast/partial, "SBP"),
// the per-op placement rule tables, the boxing table that converts between
// placements, and the cost model that chooses among them.
//
// A placement on one mesh axis says how the devices of each group over that
// axis hold a tensor: S(i) each holds one balanced shard along tensor dim i,
// B each holds all of it, P each holds a partial value and the logical tensor
// is their sum (or max). An nd placement (NdSBP) has one entry per mesh axis.
//
// Rules are data: every op family registers (in package ops, one file per
// family, with the op's type and gradient rules) the one-axis
// signatures (input placements → output placement) under which computing the
// op locally on every device yields the declared output placement. An nd
// signature picks one one-axis signature per mesh axis. Inference (package
// lower) enumerates the nd signatures, prices the boxing each needs with the
// planner in boxing.go, and takes the cheapest. An op with no registered rule
// is a compile error, never a silent fallback.
//
// Boxing plans a conversion between two nd placements as a shortest path over
// single-axis steps (all-gather, all-reduce, reduce-scatter, all-to-all,
// local slice, local zero-fill), pricing each step with the alpha-beta-gamma
// model of the axis's links and rejecting steps that are illegal because a
// later mesh axis splits the same tensor dim (see Legal).
package sbp

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the kind of a one-axis placement.
type Kind uint8

const (
	Broadcast Kind = iota // B
	Split                 // S(dim)
	Partial               // P(sum) or P(max)
)

// Reduce names the reduction of a partial placement.
type Reduce uint8

const (
	Sum Reduce = iota
	Max
)

func (r Reduce) String() string {
	if r == Max {
		return "max"
	}
	return "sum"
}

// SBP is a placement on one mesh axis.
type SBP struct {
	Kind   Kind
	Dim    int    // for Split
	Reduce Reduce // for Partial
}

// S, B, P and PMax build one-axis placements.
func S(dim int) SBP { return SBP{Kind: Split, Dim: dim} }

var (
	B    = SBP{Kind: Broadcast}
	P    = SBP{Kind: Partial}
	PMax = SBP{Kind: Partial, Reduce: Max}
)

func (s SBP) IsS() bool { return s.Kind == Split }
func (s SBP) IsB() bool { return s.Kind == Broadcast }
func (s SBP) IsP() bool { return s.Kind == Partial }

func (s SBP) String() string {
	switch s.Kind {
	case Split:
		return fmt.Sprintf("S(%d)", s.Dim)
	case Partial:
		if s.Reduce == Max {
			return "P(max)"
		}
		return "P"
	}
	return "B"
}

// NdSBP is a placement over a whole mesh: one entry per mesh axis.
type NdSBP []SBP

// Broadcasts is the all-B placement over n axes.
func Broadcasts(n int) NdSBP {
	return make(NdSBP, n) // the zero SBP is B
}

func (n NdSBP) String() string {
	// one allocation: explain names a placement per value and argument
	var b strings.Builder
	b.Grow(2 + 8*len(n))
	b.WriteByte('{')
	for i, s := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		if s.Kind == Split {
			b.WriteString("S(")
			b.WriteString(strconv.Itoa(s.Dim))
			b.WriteByte(')')
		} else {
			b.WriteString(s.String())
		}
	}
	b.WriteByte('}')
	return b.String()
}

// Equal reports whether two placements are the same.
func (n NdSBP) Equal(o NdSBP) bool {
	if len(n) != len(o) {
		return false
	}
	for i := range n {
		if n[i] != o[i] {
			return false
		}
	}
	return true
}

// Clone copies a placement.
func (n NdSBP) Clone() NdSBP { return append(NdSBP(nil), n...) }

// HasPartial reports whether any axis holds partial values.
func (n NdSBP) HasPartial() bool {
	for _, s := range n {
		if s.IsP() {
			return true
		}
	}
	return false
}

// MixedPartial reports whether n is partial by sum on one axis and by max
// on another. Such a value would need an order of reductions (the sum of
// maxima is not the maximum of sums); no op produces one, and programs may
// not declare one.
func (n NdSBP) MixedPartial() bool {
	sum, mx := false, false
	for _, s := range n {
		if s.IsP() {
			sum = sum || s.Reduce == Sum
			mx = mx || s.Reduce == Max
		}
	}
	return sum && mx
}

// SplitsDim reports whether any axis splits tensor dim d.
func (n NdSBP) SplitsDim(d int) bool {
	for _, s := range n {
		if s.IsS() && s.Dim == d {
			return true
		}
	}
	return false
}

// All lists every nd placement over axes mesh axes of a tensor of the given
// rank: B and S(0..rank-1) on each axis, and P(sum) when partial. The
// brute-force validators walk it.
func All(rank, axes int, partial bool) []NdSBP {
	one := []SBP{B}
	for d := 0; d < rank; d++ {
		one = append(one, S(d))
	}
	if partial {
		one = append(one, P)
	}
	out := []NdSBP{{}}
	for a := 0; a < axes; a++ {
		var next []NdSBP
		for _, p := range out {
			for _, s := range one {
				next = append(next, append(p.Clone(), s))
			}
		}
		out = next
	}
	return out
}
