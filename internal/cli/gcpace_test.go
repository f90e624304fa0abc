package cli

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// gogc reads GOGC without changing it.
func gogc() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestPercentForAimsAtStartHeap(t *testing.T) {
	for _, live := range []uint64{0, 1 << 20, 4 << 20, 50 << 20, 200 << 20} {
		p := percentFor(live)
		base := max(live, 4<<20)
		goal := base + base*uint64(p)/100
		require.InDelta(t, float64(startHeap), float64(goal), float64(base)/100+1, "live %d: GOGC %d", live, p)
	}
	require.Equal(t, 100, percentFor(startHeap/2))
	require.Equal(t, 100, percentFor(2*startHeap))
}

// A hold raises GOGC; overlapping holds share it; the last release puts
// back what was there before the first, whatever order they end in.
func TestCompilePacingHoldsAndRestores(t *testing.T) {
	t.Setenv("GOGC", "") // the user's GOGC turns pacing off: not set here
	before := debug.SetGCPercent(150)
	defer debug.SetGCPercent(before)
	r1 := compilePacing()
	require.Greater(t, gogc(), 150)
	r2 := compilePacing()
	r1()
	r1() // twice: the second does nothing
	require.Greater(t, gogc(), 150, "the second hold is still on")
	r2()
	require.Equal(t, 150, gogc())
}

func TestCompilePacingLeavesTheUsersGOGC(t *testing.T) {
	t.Setenv("GOGC", "80")
	before := debug.SetGCPercent(80)
	defer debug.SetGCPercent(before)
	release := compilePacing()
	require.Equal(t, 80, gogc())
	release()
	require.Equal(t, 80, gogc())
}

// Once a collection leaves at least half of startHeap alive, GOGC goes
// back to its value before the hold while the hold lasts.
func TestCompilePacingHandsBackAfterALargeHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	release := compilePacing()
	defer release()
	require.Greater(t, gogc(), 100)
	keep := make([]byte, startHeap/2+1<<20)
	for range 20 { // the finalizer runs on its own goroutine after a cycle
		runtime.GC()
		if gogc() == 100 {
			break
		}
		runtime.Gosched()
	}
	runtime.KeepAlive(keep)
	require.Equal(t, 100, gogc())
}
