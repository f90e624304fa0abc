package ops

import (
	"testing"

	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// Every op is complete: a placement rule sbp can look up (the local view's
// ops are placed by lowering instead, and have none), a family, and a type
// rule unless only the compiler makes it.
func TestEveryOpIsRegisteredWhole(t *testing.T) {
	require.NotEmpty(t, order)
	for _, name := range order {
		op := registry[name]
		require.NotEmpty(t, op.Family, name)
		if op.Kind == LocalView {
			_, ok := sbp.Lookup(name)
			require.False(t, ok, "%s: a local-view op with a rule table", name)
			require.NotNil(t, op.Type, name)
			continue
		}
		require.NotNil(t, op.Placement.Sigs, name)
		r, ok := sbp.Lookup(name)
		require.True(t, ok, name)
		require.Equal(t, op.Family, r.Family, name)
		if name != "const" && op.Kind != Tier && op.Kind != Fused {
			require.NotNil(t, op.Type, name)
			_, ok := TypeOf(name)
			require.True(t, ok, name)
		}
	}
	_, ok := TypeOf("permute")
	require.True(t, ok, "permute is a call that builds transpose")
	require.Contains(t, Calls(), "permute")
	require.NotContains(t, Calls(), "const")
	// only the training step makes the tier copies
	require.NotContains(t, Calls(), "offload")
	require.NotContains(t, Calls(), "fetch")
	// nor can any program call a fused kernel
	for _, name := range Names(Fused) {
		require.NotContains(t, Calls(), name)
	}
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	require.Panics(t, func() { Register(Op{Name: "matmul", Family: "matmul"}) })
	require.Panics(t, func() { RegisterCall("permute", nil) })
}

// Every op is in spec.md: on its own line of an op table and with its own
// placement-rule example, or on another op's that it names.
func TestEveryOpIsDocumented(t *testing.T) {
	for _, op := range All() {
		d := op.Doc
		if op.Type != nil {
			require.True(t, (len(d.Rows) > 0) != (d.RowsWith != ""), "%s: rows or rows-with, not both", op.Name)
		}
		if op.Kind == LocalView {
			require.True(t, len(d.Examples) == 0 && d.RulesWith == "", "%s: the local view's ops have no rule tables", op.Name)
		} else {
			require.True(t, (len(d.Examples) > 0) != (d.RulesWith != ""), "%s: examples or rules-with, not both", op.Name)
		}
		for _, with := range []string{d.RowsWith, d.RulesWith} {
			if with != "" {
				other, ok := Lookup(with)
				require.True(t, ok, "%s is documented with unknown op %s", op.Name, with)
				require.Equal(t, op.Family, other.Family, "%s is documented with an op of another family", op.Name)
			}
		}
	}
}
