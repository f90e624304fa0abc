package rt

import (
	"slices"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/stretchr/testify/require"
)

// Every op the compiler can emit has a CPU kernel (to() is a placement
// conversion: lowering turns it into boxing steps, never a kernel; the
// local view's collectives are communication and its boundary an alias,
// except a padded boundary, which pads or trims blocks), and the table has no
// kernel for an op the compiler does not know.
func TestEveryOpHasACPUKernel(t *testing.T) {
	known := append(append(lang.BuiltinOps(), lang.GradOps()...), lang.OptimOps()...)
	known = append(known, "arange", "axis_index", "to_local", "from_local")
	for _, op := range known {
		if op == "to" {
			continue
		}
		_, ok := cpuKernels[op]
		require.True(t, ok, "op %s has no CPU kernel", op)
	}
	for _, op := range CPUKernelOps() {
		require.True(t, op == "const" || slices.Contains(known, op), "CPU kernel for %s, which the compiler never emits", op)
	}
}
