package lang

import (
	"path/filepath"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/stretchr/testify/require"
)

// A VJP rule or the training step building an ill-typed op is a checker
// bug: it is reported as an internal error at the position it was built
// for, never a panic, and the invalid value never joins the graph.
func TestMkReportsInsteadOfPanicking(t *testing.T) {
	src := []byte("mesh M = [dp=2]\ninput x : f32[4] {B} = ones\n")
	f, err := Parse("m.mesh", src)
	require.NoError(t, err)
	c := NewChecker("m.mesh", src, CheckOptions{})
	require.NoError(t, c.File(f))
	x := c.globals["x"]
	n := len(c.g.Values)

	v := c.mk(x.Pos, "matmul", []operand{{v: x}, {v: x}}, nil)
	require.True(t, invalid(v))
	w := c.mk(x.Pos, "relu", []operand{{v: v}}, nil)
	require.True(t, invalid(w), "values built on an invalid one are invalid")
	u := c.add(&Value{Op: "to", Type: x.Type, Args: []*Value{w}, Pos: x.Pos})
	require.True(t, invalid(u))

	require.Len(t, c.errs, 1, "one error: the first one")
	require.Contains(t, c.errs[0].Error(), "m.mesh:2:1: internal error: building matmul: ")
	require.Len(t, c.g.Values, n)
	require.NoError(t, ir.Verify(c.g))
}

// Every example's graph verifies (Check runs the verifier; this says so).
func TestExamplesVerify(t *testing.T) {
	var paths []string
	for _, pattern := range []string{"../examples/*.mesh", "../examples/*/*.mesh", "../examples/*/*/*.mesh"} {
		more, err := filepath.Glob(pattern)
		require.NoError(t, err)
		paths = append(paths, more...)
	}
	require.NotEmpty(t, paths)
	for _, path := range paths {
		g, _, err := CheckFile(path, CheckOptions{})
		require.NoError(t, err, path)
		require.NoError(t, ir.Verify(g), path)
	}
}
