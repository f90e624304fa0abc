package rt

import (
	"fmt"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

func compile(t *testing.T, src string) *lower.Plan {
	t.Helper()
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	return p
}

// rowParallelMatmul is x @ W on [tp=n], both split along the contracted
// dim: one all-reduce of the partial product.
func rowParallelMatmul(n int) string {
	return fmt.Sprintf(`mesh M = [tp=%d]
input x : f32[8, 16] {S(1)} = normal(0, 1)
param W : f32[16, 4] {S(0)} = normal(0, 1)
y = x @ W
output y {B}
`, n)
}
