package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A train block that fails after ZeRO-3 chose split storage for W must not
// leave W split: the REPL shows W as declared, and the same block without
// the error then trains with W stored split.
func TestREPLFailedTrainBlockRollsBack(t *testing.T) {
	script := strings.Join([]string{
		"mesh M = [dp=2]",
		"param W : f32[4, 4] {B} = normal(0, 1)",
		"input x : f32[8, 4] {S(0)} = ones",
		"train {",
		"  loss = sum(x @ W)",
		"  optimizer = adam(lr=0.1)",
		"  zero = 3",
		"  l2 = nope(W)",
		"}",
		"",
		"W",
		":names",
		"train {",
		"  loss = sum(x @ W)",
		"  optimizer = adam(lr=0.1)",
		"  zero = 3",
		"}",
		"",
		":names",
	}, "\n")
	code, out, _ := meshrun(t, script, "repl")
	require.Equal(t, ExitOK, code)
	failed, after, ok := strings.Cut(out, `unknown function "nope"`)
	require.True(t, ok, out)
	require.Contains(t, failed, "W : f32[4, 4] {B}")
	shown, trained, ok := strings.Cut(after, "  x : f32[8, 4] {S(0)}")
	require.True(t, ok, out)
	require.Contains(t, shown, "W : f32[4, 4] {B}\n  local: [4, 4] on d0-1")
	require.Contains(t, shown, "  W : f32[4, 4] {B}\n")
	require.NotContains(t, shown, "{S(0)}", "W must not keep the ZeRO placement of the failed block")
	require.Contains(t, trained, "  W : f32[4, 4] {S(0)}\n", "the block that succeeds stores W split")
}
