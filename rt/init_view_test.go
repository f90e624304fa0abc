package rt

import (
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// TestBlockViewOfLoadedFile: a block of a loaded file that is one
// contiguous run (the whole file, rows of a row split, one index of the
// leading dims and a run of the next) is a view of the file's storage
// with the block's elements; any other block (a column split) is not; a
// view never enters a pool or arena, so no kernel output can later be
// written over the file's data.
func TestBlockViewOfLoadedFile(t *testing.T) {
	full := NewTensor(ir.F32, []int{4, 3, 5})
	d := full.Data.([]float32)
	for i := range d {
		d[i] = float32(i)
	}
	for _, c := range []struct {
		off, len []int
		view     bool
	}{
		{[]int{0, 0, 0}, []int{4, 3, 5}, true},
		{[]int{2, 0, 0}, []int{2, 3, 5}, true},
		{[]int{1, 1, 0}, []int{1, 2, 5}, true},
		{[]int{3, 2, 1}, []int{1, 1, 3}, true},
		{[]int{0, 1, 0}, []int{4, 1, 5}, false},
		{[]int{0, 0, 2}, []int{4, 3, 3}, false},
		{[]int{1, 0, 0}, []int{2, 2, 5}, false},
	} {
		b := sbp.Block{Off: c.off, Len: c.len}
		v := blockView(full, b)
		if !c.view {
			require.Nil(t, v, "%v", c)
			continue
		}
		require.NotNil(t, v, "%v", c)
		want := NewTensor(ir.F32, c.len)
		CopyBlock(want, make([]int, 3), full, c.off, c.len)
		require.Equal(t, want.Shape, v.Shape)
		require.Equal(t, want.Data, v.Data, "%v", c)
		require.True(t, v.view)
		arena := newArena(0)
		arena.put(v)
		require.Nil(t, arena.take(ir.F32, v.Numel(), v.Shape), "a view's storage entered the arena")
		pool := newHostPool(1 << 30)
		pool.min = 1
		pool.put(v)
		require.Nil(t, pool.take(ir.F32, v.Numel(), v.Shape), "a view's storage entered the pool")
	}
}
