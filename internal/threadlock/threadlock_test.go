package threadlock

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Locked follows LockOSThread and UnlockOSThread, nested ones included.
func TestLockedFollowsTheGoroutine(t *testing.T) {
	var seen []bool
	done := make(chan struct{})
	go func() { // a goroutine of its own: the harness may lock the test's
		defer close(done)
		seen = append(seen, Locked())
		runtime.LockOSThread()
		seen = append(seen, Locked())
		runtime.LockOSThread()
		runtime.UnlockOSThread()
		seen = append(seen, Locked()) // still locked once
		runtime.UnlockOSThread()
		seen = append(seen, Locked())
	}()
	<-done
	require.Equal(t, []bool{false, true, true, false}, seen)
}
