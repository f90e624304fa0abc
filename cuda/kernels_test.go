package cuda

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
)

func TestBroadcastStrides(t *testing.T) {
	// [2,3,4] with [3,1]: a walks all three dims, b is broadcast along the
	// first and last; nothing merges (b's strides break contiguity).
	bc, out, err := BroadcastFor([]int{2, 3, 4}, []int{3, 1})
	require.NoError(t, err)
	require.Equal(t, []int{2, 3, 4}, out)
	require.Equal(t, int64(3), bc.NDim)
	require.Equal(t, []int64{2, 3, 4}, bc.Shape[:3])
	require.Equal(t, []int64{12, 4, 1}, bc.A[:3])
	require.Equal(t, []int64{0, 1, 0}, bc.B[:3])

	// Equal shapes merge into one dim; size-1 dims disappear.
	bc, out, err = BroadcastFor([]int{2, 1, 3, 5}, []int{2, 1, 3, 5})
	require.NoError(t, err)
	require.Equal(t, []int{2, 1, 3, 5}, out)
	require.Equal(t, int64(1), bc.NDim)
	require.Equal(t, Broadcast{NDim: 1, Shape: [MaxDims]int64{30}, A: [MaxDims]int64{1}, B: [MaxDims]int64{1}}, bc)

	// A row vector against a matrix: [4] over [3,4] is b's stride 0 on rows.
	bc, _, err = BroadcastFor([]int{3, 4}, []int{4})
	require.NoError(t, err)
	require.Equal(t, int64(2), bc.NDim)
	require.Equal(t, []int64{4, 1}, bc.A[:2])
	require.Equal(t, []int64{0, 1}, bc.B[:2])

	// Scalars: no dims at all.
	bc, out, err = BroadcastFor(nil, []int{1, 1})
	require.NoError(t, err)
	require.Equal(t, []int{1, 1}, out)
	require.Equal(t, int64(0), bc.NDim)
}

func TestBroadcastErrors(t *testing.T) {
	_, _, err := BroadcastFor([]int{3, 4}, []int{3})
	require.EqualError(t, err, "cuda: shapes [3 4] and [3] do not broadcast")
	// Nine dims that alternate broadcasting cannot be merged below 9.
	a := []int{2, 1, 2, 1, 2, 1, 2, 1, 2}
	b := []int{1, 2, 1, 2, 1, 2, 1, 2, 1}
	_, _, err = BroadcastFor(a, b)
	require.ErrorContains(t, err, "needs more than 8 dims")
}

func TestKernelNamesAndLaunchDims(t *testing.T) {
	n, err := KernelName("gelu_grad", ir.F32)
	require.NoError(t, err)
	require.Equal(t, "mr_gelu_grad_f32", n)
	_, err = KernelName("add", ir.BF16)
	require.ErrorContains(t, err, "f32 and f64 only")
	for _, op := range append(append([]string{}, BinaryOps...), UnaryOps...) {
		// Every listed op is instantiated by the source's op table.
		require.True(t, strings.Contains(ElementwiseSource, "("+op+", T, S,"), op)
	}
	g, b := LaunchDims(0)
	require.Equal(t, [2]int{1, 256}, [2]int{g, b})
	g, _ = LaunchDims(257)
	require.Equal(t, 2, g)
	g, _ = LaunchDims(1 << 30)
	require.Equal(t, 1<<16, g)
}
