package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// :blocks shows the last local call's blocks; ':blocks step' shows one
// collective per empty line, and any other input ends the walk and is
// taken as usual.
func TestREPLBlocks(t *testing.T) {
	script := strings.Join([]string{
		":blocks",
		"mesh M = [r=2, c=2]",
		":blocks",
		"use par",
		"input X : f32[4, 4] = normal(0, 1)",
		"input W : f32[4, 4] = normal(0, 1)",
		"Y = par.summa(X, W)",
		":blocks",
		":names",
		":blocks step",
		"", // the first broadcast
		"", // the second, and acc
		":names",
		"",
	}, "\n")
	code, out, _ := meshrun(t, script, "repl")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, ":blocks: declare a mesh first")
	require.Contains(t, out, ":blocks: no local function has been called")
	parts := strings.Split(out, "  Y : f32[4, 4] {S(0), S(1)}\n")
	require.Len(t, parts, 3, out)
	all, walk, end := parts[0], parts[1], parts[2]
	require.Contains(t, all, "r=0   Y[0,0] = X[0,0]·W[0,0] + X[0,1]·W[1,0]   Y[0,1] = X[0,0]·W[0,1] + X[0,1]·W[1,1]")
	require.Contains(t, all, "broadcast over c, root c=1")

	// the call and its arguments, then one collective per Enter
	first, rest, ok := strings.Cut(walk, "(Enter: next collective; any other input stops)\n")
	require.True(t, ok, walk)
	require.Contains(t, first, "argument X as {r: S(0), c: S(1)}")
	require.NotContains(t, first, "broadcast over")
	one, two, ok := strings.Cut(rest, "    broadcast over r, root r=0")
	require.True(t, ok, rest)
	require.True(t, strings.HasPrefix(one, "  step 1\n    broadcast over c, root c=0"), one)
	require.Contains(t, one, "X[0,1] → X[0,0]  0 B")
	require.Contains(t, two, "W[1,0] → W[0,0]  0 B")
	require.Contains(t, two, "acc:")
	require.NotContains(t, two, "step 2")
	// :names ended the walk; the empty line after it shows nothing
	require.Equal(t, "", end)
}
