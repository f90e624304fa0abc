package cli

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// The outer product of two 65536-vectors is 2^32 f32 elements, 16 GiB on
// every device (nothing is split).
const outerSrc = `mesh M = [dp=2]
input a : f32[65536] = ones
y = reshape(a, 65536, 1) * reshape(a, 1, 65536)
z = sum(y)
output z
`

func TestMemoryBudgetStopsRunBeforeAllocating(t *testing.T) {
	f := writeFile(t, t.TempDir(), "outer.mesh", outerSrc)
	for _, cmd := range []string{"run", "check", "explain"} {
		code, _, errs := meshrun(t, "", cmd, f, "--memory", "1GiB")
		require.Equal(t, ExitUsage, code, cmd)
		require.Contains(t, errs, "outer.mesh:3:26: out of memory: y brings the memory held on device 0 of 2 to 16.0 GiB", cmd)
		require.Contains(t, errs, "over the budget of 1.0 GiB (--memory)\n    y = reshape(a, 65536, 1) * reshape(a, 1, 65536)\n                             ^\n", cmd)
	}
	// explain reports any plan unless asked to judge it
	code, out, errs := meshrun(t, "", "explain", f)
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "peak 16.0 GiB")
}

func TestWrappingShapeIsACompileError(t *testing.T) {
	f := writeFile(t, t.TempDir(), "wrap.mesh", `mesh M = [dp=2]
input x : f32[4, 1073741824, 1073741824, 1073741824] {S(0)} = ones
y = sum(x)
output y
`)
	for _, cmd := range []string{"run", "check"} {
		code, out, errs := meshrun(t, "", cmd, f)
		require.Equal(t, ExitUsage, code, cmd)
		require.Empty(t, out)
		require.Equal(t, f+":2:11: tensor of shape [4, 1073741824, 1073741824, 1073741824] is too large (more than 2^40 elements)\n"+
			"    input x : f32[4, 1073741824, 1073741824, 1073741824] {S(0)} = ones\n              ^\n", errs)
	}
}

func TestMemoryFlag(t *testing.T) {
	cases := map[string]int64{"0": 0, "1024": 1024, "2KiB": 2048, "1.5G": 3 << 29, "16GiB": 16 << 30, "3MB": 3e6, "1 tb": 1e12}
	for s, want := range cases {
		var m memoryFlag
		require.NoError(t, m.Set(s), s)
		require.Equal(t, want, m.bytes, s)
	}
	for _, s := range []string{"", "-1", "1x", "GiB", "NaN", "1e30TiB", "1e400"} {
		var m memoryFlag
		require.Error(t, m.Set(s), s)
	}
	f := writeFile(t, t.TempDir(), "ok.mesh", "mesh M = [dp=2]\ninput a : f32[4] = ones\noutput a\n")
	code, _, errs := meshrun(t, "", "run", f, "--memory", "lots")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, `invalid value "lots" for flag -memory`)
}

func TestDefaultMemoryBudgetSharesTheMachine(t *testing.T) {
	var c common
	total := machineMemory()
	require.Greater(t, total, int64(0))
	require.Equal(t, total/4*3/8, c.memoryBudget(8, false))
	require.Equal(t, int64(0), c.memoryBudget(8, true))
	require.True(t, c.hostInBudget(), "the machine's RAM holds the CPU backend's host tier too")
	c.backend = "cuda"
	require.False(t, c.hostInBudget(), "a GPU's device tier is not the host's RAM")
	c.backend = "cpu"
	t.Run("gpu", func(t *testing.T) {
		read := readGPUMemory
		t.Cleanup(func() { readGPUMemory = read })
		readGPUMemory = func() (int64, error) { return 140 << 30, nil }
		c := common{launcher: "local"}
		require.Equal(t, total/4*3/8, c.memoryBudget(8, false), "--backend cpu: the machine's RAM")
		for _, b := range []string{"cuda", "auto"} {
			c.backend = b
			require.Equal(t, int64(140<<30)/10*9/8, c.memoryBudget(8, false), "%s: eight ranks share the GPU", b)
			require.False(t, c.hostInBudget(), b)
		}
		c.launcher = "mpi"
		require.Equal(t, int64(140<<30)/10*9, c.memoryBudget(8, false), "under MPI each process has its GPU")
		readGPUMemory = func() (int64, error) { return 0, errors.New("no driver") }
		c.launcher, c.backend = "local", "auto"
		require.Equal(t, total/4*3/8, c.memoryBudget(8, false), "auto without a GPU runs on the CPU")
		require.True(t, c.hostInBudget())
	})
	require.NoError(t, c.memory.Set("2GiB"))
	require.Equal(t, int64(2<<30), c.memoryBudget(8, true))
	require.False(t, c.hostInBudget(), "--memory is the device's alone")
}

// check's single-device reference holds whole tensors: it gets the memory
// of all the devices, so a program that fits when sharded is checked.
func TestCheckReferenceGetsTheWholeBudget(t *testing.T) {
	// x: 2^20 f32 split over 4 devices, 1 MiB each; y another. The
	// reference holds 4 MiB + 4 MiB on its one device.
	f := writeFile(t, t.TempDir(), "sharded.mesh", `mesh M = [dp=4]
input x : f32[1048576] {S(0)} = ones
y = x * 2
output y
`)
	code, out, errs := meshrun(t, "", "check", f, "--memory", "2.5MiB")
	require.Equal(t, ExitOK, code, out+errs)
	require.Contains(t, out, "PASS")
	code, _, errs = meshrun(t, "", "check", f, "--memory", "1.5MiB")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "out of memory: y")
}

func TestREPLAppliesTheMemoryBudget(t *testing.T) {
	// a: 1024 f32 on each of 2 devices (B) is 4 KiB; b = a * 2 another 4 KiB
	code, out, errs := meshrun(t, "mesh M = [dp=2]\ninput a : f32[1024] = ones\nb = a * 2\n", "repl", "--memory", "6KiB")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "a : f32[1024]")
	require.Contains(t, out, "out of memory: b brings the memory held on device 0 of 2 to 8.0 KiB")
}
