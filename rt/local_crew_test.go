package rt

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serving counts the goroutines in serve: the local launchers' rank
// goroutines. (serve is inlined, so a stack trace does not print the
// channel that would tell one launcher's from another's.)
func serving() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "meshrun/rt.serve(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// settledServing collects what earlier tests left (no test here runs in
// parallel) until the count of serve goroutines stops falling, and
// returns it: counting all goroutines made this test flaky, as other
// tests' goroutines ended meanwhile.
func settledServing() int {
	n := serving()
	for range 100 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		m := serving()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// The local launcher's rank goroutines outlive an execution (the next
// one reuses them) but not the launcher: once it is collected they end.
func TestLocalGoroutinesEndWithIt(t *testing.T) {
	p := compile(t, `mesh M = [tp=4]
input x : f32[8, 16] {S(1)} = normal(0, 1)
param W : f32[16, 4] {S(0)} = normal(0, 1)
y = x @ W
output y {B}
`)
	before := settledServing()
	func() {
		l, err := NewLocal(context.Background(), p.Exec, Options{})
		require.NoError(t, err)
		for range 2 {
			_, err := l.Run(context.Background(), nil)
			require.NoError(t, err)
		}
		require.Equal(t, before+3, serving(), "ranks 1..3 wait for the next execution")
	}()
	deadline := time.Now().Add(10 * time.Second)
	for serving() > before && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, before, serving(), "the launcher's goroutines end once it is collected")
}
