package lower

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func atom(name string, nb []int, idx ...int) *expr {
	e := &expr{kind: eAtom, text: name, nb: nb, base: nb}
	for _, x := range idx {
		e.idx = append(e.idx, []int{x})
	}
	return e
}

// The algebra of labels, case by case, with the results written by hand.
func TestBlockLabelAlgebra(t *testing.T) {
	g := []int{50, 50}
	var terms, mixed []*expr
	for k := range 40 {
		terms = append(terms, prod(atom("X", g, 0, k), atom("W", g, k, 0)))
		mixed = append(mixed, prod(atom("X", g, 0, k), atom("W", g, (k+1)%40, 0)))
	}
	// a partial sum over a running index; one whose factors disagree is a
	// list, its middle elided when very long
	require.Equal(t, "Σ_{t=0..39} X[0,t]·W[t,0]", sum(terms...).String())
	require.Equal(t, "X[0,0]·W[1,0] + X[0,1]·W[2,0] + … (37 terms) … + X[0,39]·W[0,0]", sum(mixed...).String())
	require.Equal(t, "X[0,0]·W[1,0] + X[0,1]·W[2,0] + X[0,2]·W[3,0]", sum(mixed[:3]...).String())

	// a gather of strided row blocks merges; a reduce-scatter's piece of a
	// product comes from its left factor's rows, and cuts a single block
	q := []int{4, 2}
	xh := cat(0, []*expr{atom("X", q, 1, 0), atom("X", q, 3, 0)})
	require.Equal(t, "X[{1,3},0]", xh.String())
	require.Equal(t, "X[3,0]·W[0,1]", piece(prod(xh, atom("W", []int{2, 2}, 0, 1)), 0, 2, 1, 2).String())
	require.Equal(t, "X[1,0₁]ᵀ·Y", piece(prod(transpose(atom("X", q, 1, 0), 2), atom("Y", []int{1, 1}, 0, 0)), 0, 2, 1, 2).String())
	// transposes reverse products; zeros vanish from sums and products
	require.Equal(t, "W[0,1]ᵀ·X[1,0]ᵀ", transpose(prod(atom("X", q, 1, 0), atom("W", []int{2, 2}, 0, 1)), 2).String())
	require.Equal(t, "X[1,0]", sum(zero, atom("X", q, 1, 0), prod(zero, atom("W", q, 0, 0))).String())
	// numbers fold
	f, ok := fold("sub", []*expr{num("3"), num("1")})
	require.True(t, ok)
	require.Equal(t, "2", f.String())
}
