package lower

import (
	"fmt"
	"slices"
)

// A long sum of products of blocks is written as the sum over a running
// block index when its terms follow one: SUMMA's result on 8×8 is
// Σ_t X[5,t]·W[t,0], not eight products. The terms must be products of
// the same tensors' single blocks that differ only where one index t runs
// through a range of blocks (in any order: the sum commutes); a partial
// sum reads Σ_{t=0..4}.

// sigmaIndex marks the running index in a template atom.
const sigmaIndex = -1

func (e *expr) sigma() (string, bool) {
	first := factors(e.args[0])
	ts := make([]int, len(e.args))
	vary := map[[2]int]bool{} // (factor, dim) positions that run with t
	for i, term := range e.args {
		fs := factors(term)
		if len(fs) != len(first) {
			return "", false
		}
		ts[i] = sigmaIndex
		for k, f := range fs {
			if !sameGrid(f, first[k]) {
				return "", false
			}
			for d := range f.idx {
				x, x0 := f.blocks(d), first[k].blocks(d)
				if len(x) != 1 || len(x0) != 1 {
					return "", false
				}
				if i == 0 || x[0] == x0[0] && !vary[[2]int{k, d}] {
					continue
				}
				vary[[2]int{k, d}] = true
			}
		}
	}
	if len(vary) == 0 {
		return "", false
	}
	// every running position of a term holds the same block: t of that term
	for i, term := range e.args {
		fs := factors(term)
		for pos := range vary {
			x := fs[pos[0]].blocks(pos[1])[0]
			if ts[i] != sigmaIndex && ts[i] != x {
				return "", false
			}
			ts[i] = x
		}
	}
	sorted := slices.Clone(ts)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] != sorted[i-1]+1 {
			return "", false
		}
	}
	tmpl := make([]*expr, len(first))
	for k, f := range first {
		a := *f
		a.idx = slices.Clone(f.idx)
		for d := range a.idx {
			if vary[[2]int{k, d}] {
				a.idx[d] = []int{sigmaIndex}
			}
		}
		tmpl[k] = &a
	}
	nb := -1 // t runs over blocks of one size
	for pos := range vary {
		if n := first[pos[0]].nb[pos[1]]; nb >= 0 && n != nb {
			return "", false
		} else {
			nb = n
		}
	}
	head := "Σ_t "
	if lo, hi := sorted[0], sorted[len(sorted)-1]; lo != 0 || hi != nb-1 {
		head = fmt.Sprintf("Σ_{t=%d..%d} ", lo, hi)
	}
	return head + joinExprs(tmpl, "·", eProd), true
}

// factors is a term's matrix factors; each must be a plain block.
func factors(term *expr) []*expr {
	fs := []*expr{term}
	if term.kind == eProd {
		fs = term.args
	}
	for _, f := range fs {
		if f.kind != eAtom || f.part != "" {
			return nil
		}
	}
	return fs
}

func sameGrid(a, b *expr) bool {
	return a.text == b.text && a.trans == b.trans && slices.Equal(a.nb, b.nb)
}

// abbreviate joins args, eliding the middle of a very long list.
func abbreviate(args []*expr, sep string, in exprKind) string {
	s := joinExprs(args, sep, in)
	if len([]rune(s)) <= 4*maxAnyLabel || len(args) <= 4 {
		return s
	}
	head := joinExprs(args[:2], sep, in)
	return fmt.Sprintf("%s%s… (%d terms) …%s%s", head, sep, len(args)-3, sep, wrap(args[len(args)-1], in))
}
