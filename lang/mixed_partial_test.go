package lang

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A placement partial by sum on one axis and by max on another has no
// defined meaning (Σ max ≠ max Σ); it is a compile error at the placement,
// wherever a placement is written: a declaration, to() and output.
func TestMixedPartialPlacementIsRejected(t *testing.T) {
	cases := []struct{ src, line string }{
		{"input x : f32[4, 4] {P(max), P} = ones\noutput x\n", "input x : f32[4, 4] {P(max), P} = ones"},
		{"input x : f32[4, 4] = ones\ny = to(x, {P, P(max)})\noutput y\n", "y = to(x, {P, P(max)})"},
		{"input x : f32[4, 4] = ones\noutput x {a: P(max), b: P(sum)}\n", "output x {a: P(max), b: P(sum)}"},
	}
	for _, c := range cases {
		src := "mesh M = [a=2, b=2]\n" + c.src
		_, err := CheckSource("m.mesh", []byte(src), CheckOptions{})
		require.Error(t, err, c.src)
		list, ok := err.(ErrorList)
		require.True(t, ok, "%T", err)
		require.NotEmpty(t, list) // followers of the error are another matter (item 7)
		require.Contains(t, list[0].Msg, "mixes P(sum) and P(max)")
		line := 1 + strings.Count(src[:strings.Index(src, c.line)], "\n")
		require.Equal(t, line, list[0].Pos.Line, "%v", list)
		out := Render(err, map[string][]byte{"m.mesh": []byte(src)})
		require.Contains(t, out, fmt.Sprintf("m.mesh:%d:%d:", line, strings.Index(c.line, "{")+1), out)
		require.Contains(t, out, c.line+"\n", out)
		require.Contains(t, out, "^", out)
	}
	// one kind of partial on several axes is fine
	_, err := CheckSource("m.mesh", []byte("mesh M = [a=2, b=2]\ninput x : f32[4, 4] {P(max), P(max)} = ones\noutput x\n"), CheckOptions{})
	require.NoError(t, err)
}
