package rt

import (
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/stretchr/testify/require"
)

// TestHoldsTableMatchesMap drives tensorCounts and a Go map with the same
// random holds and drops (a few hundred tensors, so the table grows and
// its runs wrap around its end) and checks every answer and count
// against the map's.
func TestHoldsTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ts := make([]*Tensor, 300)
	for i := range ts {
		ts[i] = NewTensor(ir.F32, []int{1})
	}
	for round := range 3 {
		var c tensorCounts
		if round > 0 {
			c.grow() // a cleared table is reused: start from one that has entries
			c.add(ts[0])
			c.clear()
		}
		ref := map[*Tensor]int32{}
		for step := range 20000 {
			x := ts[rng.IntN(len(ts))]
			if rng.IntN(5) < 3 || ref[x] == 0 { // hold
				c.add(x)
				ref[x]++
			} else {
				want := ref[x] == 1
				ref[x]--
				if ref[x] == 0 {
					delete(ref, x)
				}
				require.Equal(t, want, c.drop(x), "round %d step %d", round, step)
			}
			if step%97 == 0 {
				for _, y := range ts {
					require.Equal(t, ref[y], c.count(y), "round %d step %d", round, step)
				}
				require.Equal(t, len(ref), c.used)
			}
		}
	}
}

// TestHoldsUnheldDrop: a drop of a buffer not held frees nothing and
// leaves it counted at -1, as the map the table replaced did; a buffer
// of another type is counted apart.
func TestHoldsUnheldDrop(t *testing.T) {
	h := newHolds()
	a := NewTensor(ir.F32, []int{2})
	require.False(t, h.drop(a))
	require.Equal(t, int32(-1), h.count(a))
	h.add(a)
	require.Equal(t, int32(0), h.count(a))
	var o Buffer = otherBuffer{1}
	h.add(o)
	h.add(o)
	require.Equal(t, int32(2), h.count(o))
	require.False(t, h.drop(o))
	require.True(t, h.drop(o))
	h.clear()
	require.Equal(t, int32(0), h.count(a))
}

// otherBuffer is a Buffer that is not a *Tensor.
type otherBuffer struct{ id int }

func (otherBuffer) Elem() ir.DType { return ir.F32 }
func (otherBuffer) Dims() []int    { return nil }
func (otherBuffer) Bytes() int64   { return 0 }
