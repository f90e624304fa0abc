package rt

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// LimitMemory sets the plan's total plus a fifth and 64 MiB, gives the
// previous limit back, and leaves a limit the user chose alone.
func TestLimitMemoryFollowsThePlan(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Setenv("GOMEMLIMIT", "")
	restore := LimitMemory(5 << 30)
	require.Equal(t, int64(6<<30+64<<20), debug.SetMemoryLimit(-1))
	restore()
	require.Equal(t, old, debug.SetMemoryLimit(-1))

	t.Setenv("GOMEMLIMIT", "off")
	restore = LimitMemory(5 << 30)
	require.Equal(t, old, debug.SetMemoryLimit(-1), "GOMEMLIMIT is the user's")
	restore()
	require.Equal(t, old, debug.SetMemoryLimit(-1))
}
