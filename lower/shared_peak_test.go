package lower

import (
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/stretchr/testify/require"
)

// unevenSource splits 6 rows over dp=4 and then tp=2, so blocks differ
// between devices and both axes' coordinates matter.
const unevenSource = `mesh M = [dp=4, tp=2]
input x : f32[6, 512] {S(0), S(0)} = normal(0, 1)
param W : f32[6, 512] {S(0), S(0)} = normal(0, 1)
train {
    loss = mean(x * W)
    optimizer = adam(lr=0.01)
}
`

// The memory pass shares one replay among ranks whose programs and
// block sizes agree, and explain sums the parameter, optimizer and
// gradient bytes once per pipeline rank when every block is even; both
// must give every device what its own walk gives.
func TestSharedPeaksAndHeldBytesMatchEachDevice(t *testing.T) {
	plans := map[string]*Plan{}
	for _, name := range examples(t) {
		plans[name] = compileExample(t, name)
	}
	g, err := lang.CheckSource("uneven.mesh", []byte(unevenSource), lang.CheckOptions{})
	require.NoError(t, err)
	plans["uneven"], err = Lower(g, Options{Verify: true})
	require.NoError(t, err)
	for name, p := range plans {
		held := heldByDevice(p)
		for r := range p.Peak {
			require.Equal(t, p.Exec.Peak(r), p.Peak[r], "%s rank %d", name, r)
			require.Equal(t, sumHeld(p, r), held(r), "%s rank %d", name, r)
		}
	}
	first := plans["uneven"].Peak[0]
	require.NotEqual(t, first, plans["uneven"].Peak[len(plans["uneven"].Peak)-1], "the uneven plan's ranks differ")
}
