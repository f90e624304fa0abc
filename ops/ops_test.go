package ops

import (
	"testing"

	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// Every op is complete: a placement rule sbp can look up, a family, and a
// type rule unless only the compiler makes it.
func TestEveryOpIsRegisteredWhole(t *testing.T) {
	require.NotEmpty(t, order)
	for _, name := range order {
		op := registry[name]
		require.NotEmpty(t, op.Family, name)
		require.NotNil(t, op.Placement.Sigs, name)
		r, ok := sbp.Lookup(name)
		require.True(t, ok, name)
		require.Equal(t, op.Family, r.Family, name)
		if name != "const" {
			require.NotNil(t, op.Type, name)
			_, ok := TypeOf(name)
			require.True(t, ok, name)
		}
	}
	_, ok := TypeOf("permute")
	require.True(t, ok, "permute is a call that builds transpose")
	require.Contains(t, Calls(), "permute")
	require.NotContains(t, Calls(), "const")
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	require.Panics(t, func() { Register(Op{Name: "matmul", Family: "matmul"}) })
	require.Panics(t, func() { RegisterCall("permute", nil) })
}
