package lower

import (
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/stretchr/testify/require"
)

// x is 1024x1024 f32 split in two: 2 MiB per device. y = x * 2 is another
// 2 MiB while x and the 4-byte constant are alive (the constant is freed
// after y), and z a third while x and y are (their last use frees them
// after z is written): the peak is 6 MiB. A 3 MiB budget is first crossed
// by y, at line 3.
const budgetSrc = `mesh M = [dp=2]
input x : f32[1024, 1024] {S(0)} = ones
y = x * 2
z = y + x
output z
`

func TestMemoryBudgetNamesTheValueThatDoesNotFit(t *testing.T) {
	g, err := lang.CheckSource("m.mesh", []byte(budgetSrc), lang.CheckOptions{})
	require.NoError(t, err)
	_, err = Lower(g, Options{Memory: 3 << 20})
	require.Error(t, err)
	require.Equal(t, "m.mesh:3:7: out of memory: y brings the memory held on device 0 of 2 to 4.0 MiB (peak 6.0 MiB per device), over the budget of 3.0 MiB (--memory)", err.Error())
	// the budget is inclusive: exactly the peak fits, a byte less does not
	p, err := Lower(g, Options{})
	require.NoError(t, err)
	require.Equal(t, int64(6<<20), p.Peak[0])
	_, err = Lower(g, Options{Memory: p.Peak[0]})
	require.NoError(t, err)
	_, err = Lower(g, Options{Memory: p.Peak[0] - 1})
	require.Error(t, err)
}
