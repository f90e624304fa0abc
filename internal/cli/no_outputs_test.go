package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A program with no output statement still runs and is checked: its report
// says so instead of ending silently.
func TestProgramWithoutOutputs(t *testing.T) {
	f := writeFile(t, t.TempDir(), "noout.mesh", "mesh M = [a=2]\ninput x : f32[4] {S(0)} = ones\ny = x + x\n")
	code, out, errs := meshrun(t, "", "run", f)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "ran on 2 devices [a=2]")
	code, out, errs = meshrun(t, "", "check", f)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "(the program has no outputs to compare)")
}
