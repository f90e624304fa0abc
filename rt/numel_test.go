package rt

import (
	"testing"

	"github.com/meshrun/meshrun/internal/size"
	"github.com/stretchr/testify/require"
)

// TestNumelAsSizeElements: numel's multiply-without-division path gives
// size.Elements's count wherever that has one, and panics wherever it has
// none (a negative dim, a count past size.MaxElements, a product that
// overflows 64 bits), zero dims included.
func TestNumelAsSizeElements(t *testing.T) {
	for _, sh := range [][]int{
		{}, {0}, {7}, {256, 1024}, {3, 0, 5}, {1 << 20, 1 << 20}, {1 << 20, 1 << 20, 2},
		{1 << 40}, {1<<40 + 1}, {1 << 62, 4}, {1 << 62, 0}, {-1, 3}, {3, -1}, {1 << 13, 1 << 13, 1 << 13, 1 << 13},
		{1 << 32, 1 << 32, 0}, {2, 3, 4, 5, 6, 7},
	} {
		want, ok := size.Elements(sh)
		if !ok {
			require.Panics(t, func() { numel(sh) }, "%v", sh)
			continue
		}
		require.Equal(t, want, numel(sh), "%v", sh)
	}
}
