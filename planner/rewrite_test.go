package planner

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An axis takes the link of the smallest block that holds its groups
// whole: row-major, the last axis is consecutive devices.
func TestLinksAxis(t *testing.T) {
	l := mustLinks(t, "8:1:300,*:10:25")
	for _, tc := range []struct {
		sizes []int
		axis  int
		level int
	}{
		{[]int{2, 4, 8}, 2, 0}, // 8 consecutive devices: one node
		{[]int{2, 4, 8}, 1, 1}, // stride 8: across nodes
		{[]int{4, 2, 4}, 1, 0}, // stride 4, size 2: devices 0 and 4, one node
		{[]int{4, 2, 4}, 0, 1},
		{[]int{16}, 0, 1}, // 16 devices span two nodes
	} {
		_, level := l.Axis(tc.sizes, tc.axis)
		require.Equal(t, tc.level, level, "%v axis %d", tc.sizes, tc.axis)
	}
	require.Equal(t, "8:1:300,*:10:25", l.String())
}

// A candidate rewrites only the mesh, the strategy settings and the
// checkpoint marks; the rest of the file is as written.
func TestSourceRewrite(t *testing.T) {
	p, err := Load("../examples/train/gpt/gpt.mesh")
	require.NoError(t, err)
	require.Equal(t, []string{"dp", "tp"}, p.Axes)
	require.Equal(t, []string{"block"}, []string{p.Defs[0].Name})
	require.True(t, p.Defs[0].Checkpoint)
	c := &Candidate{Sizes: []int{1, 2}, PP: 2, PPPos: 1, Micro: 1, Schedule: "zb1p", Zero: 2, Checkpoint: []bool{false}}
	src := string(p.Source(c, ""))
	require.Contains(t, src, "mesh M = [dp=1, pipeline pp=2, tp=2]\n")
	require.Contains(t, src, "\ndef block(x, l) {")
	require.NotContains(t, src, "checkpoint def")
	for _, s := range []string{"zero = 2", "microbatches = 1", "pipeline = zb1p"} {
		require.Equal(t, 1, strings.Count(src, s), s)
	}
	// everything else is untouched: drop the changed lines from both
	keep := func(text string) []string {
		var out []string
		for _, l := range strings.Split(text, "\n") {
			if !strings.HasPrefix(l, "mesh ") && !strings.Contains(l, "def block") && !strings.Contains(l, "chosen by meshrun plan") {
				out = append(out, l)
			}
		}
		return out
	}
	require.Equal(t, keep(string(p.Src)), keep(src))
	// the original strategy writes the original file back
	back := &Candidate{Sizes: []int{2, 2}, PP: 1, Micro: 1, Checkpoint: []bool{true}}
	require.Equal(t, string(p.Src), string(p.Source(back, "")))
}
