package rt

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// LimitMemory sets the plan's total plus a tenth and 64 MiB, gives the
// previous limit back, adds overlapping runs' limits, and leaves a limit
// the user chose alone.
func TestLimitMemoryFollowsThePlan(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Setenv("GOMEMLIMIT", "")
	restore := LimitMemory(5 << 30)
	require.Equal(t, int64(5<<30+(5<<30)/10+64<<20), debug.SetMemoryLimit(-1))
	restore()
	require.Equal(t, old, debug.SetMemoryLimit(-1))

	// overlapping runs add up; the last one out restores the old limit
	r1, r2 := LimitMemory(5<<30), LimitMemory(1<<30)
	require.Equal(t, int64(5<<30+(5<<30)/10+64<<20+(1<<30+(1<<30)/10+64<<20)), debug.SetMemoryLimit(-1))
	r1()
	r1() // twice is once
	require.Equal(t, int64(1<<30+(1<<30)/10+64<<20), debug.SetMemoryLimit(-1))
	r2()
	require.Equal(t, old, debug.SetMemoryLimit(-1))

	t.Setenv("GOMEMLIMIT", "off")
	restore = LimitMemory(5 << 30)
	require.Equal(t, old, debug.SetMemoryLimit(-1), "GOMEMLIMIT is the user's")
	restore()
	require.Equal(t, old, debug.SetMemoryLimit(-1))
}
