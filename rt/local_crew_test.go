package rt

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The local launcher's rank goroutines outlive an execution (the next
// one reuses them) but not the launcher: once it is collected they end.
func TestLocalGoroutinesEndWithIt(t *testing.T) {
	p := compile(t, `mesh M = [tp=4]
input x : f32[8, 16] {S(1)} = normal(0, 1)
param W : f32[16, 4] {S(0)} = normal(0, 1)
y = x @ W
output y {B}
`)
	before := runtime.NumGoroutine()
	func() {
		l, err := NewLocal(context.Background(), p.Exec, Options{})
		require.NoError(t, err)
		for range 2 {
			_, err := l.Run(context.Background(), nil)
			require.NoError(t, err)
		}
		require.GreaterOrEqual(t, runtime.NumGoroutine(), before+3, "ranks 1..3 wait for the next execution")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "the launcher's goroutines end once it is collected")
}
