package lang

import (
	"fmt"
	"testing"

	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// zeroSrc is a ZeRO-1 train block on a mesh and input placement given by
// the caller, with extra train settings.
func zeroSrc(mesh, xPlacement, extra string) string {
	return fmt.Sprintf(`mesh M = %s
input x : f32[8, 4] %s = ones
param W : f32[4, 4] = normal(0, 1)
train {
    loss = sum(x @ W)
    optimizer = adam(lr=0.1)
    zero = 1%s
}
`, mesh, xPlacement, extra)
}

// No axis name is special: the data-parallel axis is the one the inputs
// split their batch over, or the one the train block names.
func TestDataAxis(t *testing.T) {
	for _, tc := range []struct {
		name, mesh, x, extra string
		axis                 int
	}{
		{"dp as before", "[dp=2]", "{S(0)}", "", 0},
		{"another name", "[batch=2, model=2]", "{S(0), B}", "", 0},
		{"second axis", "[model=2, rows=2]", "{S(1), S(0)}", "", 1},
		{"named", "[a=2, b=2]", "{S(0), S(0)}", "\n    data_axis = b", 1},
		{"named without split inputs", "[a=2, b=2]", "{B, B}", "\n    data_axis = a", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := zeroSrc(tc.mesh, tc.x, tc.extra)
			g, err := CheckSource("z.mesh", []byte(src), CheckOptions{})
			require.NoError(t, err, src)
			require.Equal(t, tc.axis, g.Train.DataAxis)
			// ZeRO-1 stores W's Adam moments split over the data axis
			for _, c := range g.Train.Carry[1:] {
				require.Equal(t, sbp.S(0), c.Source.Declared[tc.axis], c.Source.Label())
			}
		})
	}
}

func TestDataAxisErrors(t *testing.T) {
	for _, tc := range []struct{ mesh, x, extra, want string }{
		{"[dp=2]", "{B}", "", "z.mesh:4:1: zero = 1 shards over the data-parallel axis, but no input is split along its batch dim (dim 0); name it with data_axis = NAME"},
		{"[a=2, b=2]", "{S(0), S(0)}", "", "the inputs split their batch dim over axes a and b; name it with data_axis = NAME"},
		{"[a=2, b=2]", "{S(0), B}", "\n    data_axis = c", "z.mesh:8:17: data_axis must name an axis of mesh M [a=2, b=2]"},
	} {
		_, err := CheckSource("z.mesh", []byte(zeroSrc(tc.mesh, tc.x, tc.extra)), CheckOptions{})
		require.ErrorContains(t, err, tc.want)
	}
}
