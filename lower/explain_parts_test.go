package lower

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Explain's ops rows and the text's ops table are made in parts in
// parallel (explainOps, opRows): cut into parts of 5 ops on 4 goroutines,
// the report's JSON and text equal the report made in one part, for every
// example, the uneven program and a pipelined GPT. Run it under -race too.
func TestExplainInPartsIsExplainWhole(t *testing.T) {
	plans := testPlansAndGPT(t)
	defer func(n, procs int) { opsPerPart = n; runtime.GOMAXPROCS(procs) }(opsPerPart, runtime.GOMAXPROCS(4))
	cut := 0
	for name, p := range plans {
		opsPerPart = len(p.Values) + 1
		require.Len(t, parts(len(p.Values), opsPerPart), 1)
		whole := Explain(p)
		wholeJSON, err := json.Marshal(whole)
		require.NoError(t, err)
		opsPerPart = 5
		if len(parts(len(p.Values), opsPerPart)) > 1 {
			cut++
		}
		inParts := Explain(p)
		partsJSON, err := json.Marshal(inParts)
		require.NoError(t, err)
		require.Equal(t, string(wholeJSON), string(partsJSON), name)
		opsPerPart = len(p.Values) + 1
		text := whole.Text()
		opsPerPart = 5
		require.Equal(t, text, inParts.Text(), name)
	}
	require.Greater(t, cut, len(plans)/2)
}

// parts covers [0, n) in order, without gaps or overlaps, in at most
// GOMAXPROCS ranges of at least the given size (one range when n is
// smaller).
func TestPartsCoverTheRange(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	for _, c := range []struct{ n, least, want int }{{0, 4, 1}, {3, 4, 1}, {8, 4, 2}, {100, 4, 3}, {11, 5, 2}} {
		ps := parts(c.n, c.least)
		require.Len(t, ps, c.want, "n=%d least=%d", c.n, c.least)
		next := 0
		for _, p := range ps {
			require.Equal(t, next, p[0])
			require.LessOrEqual(t, p[0], p[1])
			if len(ps) > 1 {
				require.GreaterOrEqual(t, p[1]-p[0], c.least)
			}
			next = p[1]
		}
		require.Equal(t, c.n, next)
	}
}

// inParallel returns the failure of the lowest index, as a loop would,
// and raises a worker's panic in the caller (runPass recovers a pass's
// panic there); inBackground's wait raises it too.
func TestInParallelErrorsAndPanics(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	ran := make([]bool, 50)
	err := inParallel(50, func(i int) error {
		ran[i] = true
		if i == 7 || i == 30 {
			return fmt.Errorf("rank %d", i)
		}
		return nil
	})
	require.EqualError(t, err, "rank 7")
	require.NotContains(t, ran, false)
	require.PanicsWithValue(t, "boom 3", func() {
		_ = inParallel(10, func(i int) error {
			if i == 3 || i == 8 {
				panic(fmt.Sprintf("boom %d", i))
			}
			return nil
		})
	})
	wait := inBackground(5, func(i int) {
		if i == 4 {
			panic("late")
		}
	})
	require.PanicsWithValue(t, "late", wait)
}
