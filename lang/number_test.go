package lang

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// ceil and integer fold numbers into shapes; anything but a number, or an
// integer() that is not whole, is an error at the call.
func TestNumberCalls(t *testing.T) {
	src := `mesh M = [dp=1]
input X : f32[7, 2] = normal(0, 1)
def head(x, f) {
    return slice(x, 0, 0, ceil(size(x, 0) * f))
}
def half(x) {
    return slice(x, 0, 0, integer((size(x, 0) + 1) / 2, "half the rows"))
}
Y = head(X, 0.5)
Z = head(X, 0.3)
H = half(X)
output Y
output Z
output H
`
	g, err := CheckSource("m.mesh", []byte(src), CheckOptions{})
	require.NoError(t, err)
	require.Equal(t, []int{4, 2}, g.Outputs[0].Value.Type.Shape) // ⌈3.5⌉
	require.Equal(t, []int{3, 2}, g.Outputs[1].Value.Type.Shape) // ⌈2.1⌉
	require.Equal(t, []int{4, 2}, g.Outputs[2].Value.Type.Shape)
	for _, c := range []struct{ body, msg string }{
		{"ceil(x)", "ceil takes one number: ceil(n): a finite number known at compile time, not a tensor"},
		{"ceil(1, 2)", "ceil takes one number: ceil(n)"},
		{`integer(size(x, 0) / 2, "half the rows")`, "half the rows must be a whole number, not 3.5"},
		{"integer(4)", `integer takes a number and what it is: integer(n, "tokens per group")`},
		{`integer(x, "rows")`, `integer takes a number and what it is: integer(n, "tokens per group"): a finite number known at compile time, not a tensor`},
		{`integer(1 / 0, "rows")`, `integer takes a number and what it is: integer(n, "tokens per group"): a finite number known at compile time, not a tensor`},
	} {
		src := "mesh M = [dp=1]\ninput X : f32[7, 2] = normal(0, 1)\ndef f(x) {\n    n = " + c.body + "\n    return slice(x, 0, 0, n)\n}\nY = f(X)\noutput Y\n"
		_, err := CheckSource("m.mesh", []byte(src), CheckOptions{})
		var list ErrorList
		require.True(t, errors.As(err, &list), "%s: %v", c.body, err)
		require.Equal(t, c.msg+" (called from m.mesh:7:5)", list[0].Msg, c.body)
		require.Equal(t, 4, list[0].Pos.Line, c.body)
	}
	_, err = CheckSource("m.mesh", []byte("mesh M = [dp=1]\ndef ceil(x) {\n    return x\n}\n"), CheckOptions{})
	require.ErrorContains(t, err, "m.mesh:2:1: ceil is a built-in op and cannot be redefined")
}
