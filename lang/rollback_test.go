package lang

import (
	"testing"

	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// replStmts feeds a REPL checker one statement at a time and returns the
// error of each.
func replStmts(t *testing.T, c *Checker, srcs ...string) []error {
	t.Helper()
	var errs []error
	for _, src := range srcs {
		f, err := Parse("<repl>", []byte(src))
		require.NoError(t, err, src)
		for _, s := range f.Stmts {
			errs = append(errs, c.Stmt(s, []byte(src)))
		}
	}
	return errs
}

func newREPL() *Checker {
	return NewChecker("<repl>", nil, CheckOptions{AllowExprStmt: true})
}

// replDecls declare W and x on two devices.
var replDecls = []string{
	"mesh M = [dp=2]",
	"param W : f32[4, 4] {B} = normal(0, 1)",
	"input x : f32[8, 4] {S(0)} = ones",
}

// A train block that fails after ZeRO-3 has chosen the params' split
// storage leaves them as declared: the REPL shows what the program says.
func TestFailedTrainBlockLeavesParamsAsDeclared(t *testing.T) {
	c := newREPL()
	errs := replStmts(t, c, append(replDecls, "train {\n loss = sum(x @ W)\n optimizer = adam(lr=0.1)\n zero = 3\n l2 = nope(W)\n}")...)
	require.NoError(t, errs[2])
	require.ErrorContains(t, errs[3], `unknown function "nope"`)
	g := c.Graph()
	W := c.Names()["W"]
	require.Equal(t, sbp.NdSBP{sbp.B}, W.Declared)
	require.Nil(t, g.Train)
	require.Len(t, g.Values, 2)

	// the same block without the error succeeds, and then W is stored split
	errs = replStmts(t, c, "train {\n loss = sum(x @ W)\n optimizer = adam(lr=0.1)\n zero = 3\n}")
	require.NoError(t, errs[0])
	require.Equal(t, sbp.NdSBP{sbp.S(0)}, W.Declared)
	require.NotNil(t, g.Train)
}

// A failed statement does not keep the name it gave a value an earlier
// statement made (grad returns the adjoint the first grad built).
func TestFailedAssignKeepsEarlierValuesUnnamed(t *testing.T) {
	c := newREPL()
	errs := replStmts(t, c, append(replDecls, "l = sum(x @ W)", "grad(l, W)")...)
	for _, err := range errs {
		require.NoError(t, err)
	}
	adj := c.Last
	require.Equal(t, "", adj.Name)
	errs = replStmts(t, c, "x = grad(l, W)")
	require.ErrorContains(t, errs[0], "cannot be reassigned")
	require.Equal(t, "", adj.Name)
}
