//go:build linux

package cli

// The local view under real MPI. A local function's collectives are the
// ones its body writes, and under MPI each maps to something other than
// the in-process runtime's: a shift is an MPI send and receive (tag 0),
// broadcast is MPI_Ibcast, reduce(root) is MPI_Ireduce, all_to_all is MPI_Alltoallv. Four examples cover
// them: gemm_2d (SUMMA's broadcasts), long_attention (ring attention's
// shifts, Ulysses' all-to-alls), train/transformer_2d (SUMMA trained: its
// backward turns every broadcast into a reduce to the same root; the
// layernorm's row statistics are all-reduced over one grid axis) and
// train/gemm_backward (2.5D's weight gradient all-reduced over depth, 3D's
// all-gathers and reduce-scatters transposed). Each runs under --launcher
// local and under each installed MPI launcher: the outputs, or the loss
// curves and trained parameters, must agree, and `meshrun check
// --launcher mpi` must pass. For the forward programs the MPI run's trace
// must also show every device sending the bytes worked out by hand from
// the algorithm's formula.

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// localViewCase is one example and, for a forward program, the bytes each
// device must send per kind of written collective (summed over the run),
// worked out by hand from the example's shapes.
type localViewCase struct {
	path string
	sent map[string]int // trace event name up to "(" → bytes per device
}

var localViewCases = []localViewCase{
	// 3×3 grid; every device is the root of one row broadcast of X's
	// [6, 10] block and one column broadcast of W's [10, 4] block; a
	// binomial tree's root sends ⌈lg 3⌉ = 2 copies, the leaves none:
	// 2·240 + 2·160 bytes.
	{"examples/gemm_2d.mesh", map[string]int{"broadcast": 2*6*10*4 + 2*10*4*4}},
	// 4 devices; ring attention's K and V blocks [8, 12, 8] make 3 hops;
	// Ulysses' 4 all-to-alls each send 3/4 of a [2, 4, 12, 8] block; the
	// plain formula's K and V, all-gathered by the compiler, 3/4 of the
	// whole [2, 4, 48, 8] each; a receive sends nothing.
	{"examples/long_attention.mesh", map[string]int{
		"send":       3 * 2 * 8 * 12 * 8 * 4,
		"recv":       0,
		"all_to_all": 4 * 3 * (2 * 4 * 12 * 8 * 4) / 4,
		"all_gather": 2 * 3 * (2 * 4 * 48 * 8 * 4) / 4,
	}},
	{"examples/train/transformer_2d.mesh", nil},
	{"examples/train/gemm_backward.mesh", nil},
}

func TestMPILocalView(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MPI jobs; skipped with -short")
	}
	var launchers []mpiLauncher
	for _, l := range []mpiLauncher{openMPI, mpich} {
		if _, err := exec.LookPath(l.name); err == nil {
			launchers = append(launchers, l)
		}
	}
	if len(launchers) == 0 {
		t.Skipf("no MPI launcher (%s, %s) found: apt-get install openmpi-bin mpich", openMPI.name, mpich.name)
	}
	e := buildForMPI(t)
	byPath := map[string]example{}
	for _, ex := range e.examples(t) {
		byPath[ex.path] = ex
	}
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			for _, c := range localViewCases {
				ex, ok := byPath[c.path]
				require.True(t, ok, "%s: not among the examples", c.path)
				t.Run(strings.TrimSuffix(filepath.Base(c.path), ".mesh"), func(t *testing.T) {
					require.Equal(t, ex.train, c.sent == nil, "%s: a training example has no byte table", c.path)
					e.compareLocalMPI(t, l, ex)
					r := e.launch(t, l, ex.size, nil, 2*time.Minute, "check", ex.path, "--launcher", "mpi")
					require.Equal(t, 0, r.code, "check under %s:\n%s", l.name, r.out)
					require.Equal(t, 1, countLines(r.out, "PASS:"), "want exactly one PASS line:\n%s", r.out)
					if c.sent != nil {
						e.requireSentPerDevice(t, l, ex, c.sent)
					}
				})
			}
		})
	}
}

// buildForMPI builds the meshrun binary at a path unique to this test (so
// the processes it starts can be told apart) and ends, by pid, any a
// failed subtest leaves behind.
func buildForMPI(t *testing.T) *mpiEnv {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot build the meshrun binary")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	e := &mpiEnv{bin: filepath.Join(t.TempDir(), "meshrun"), root: root}
	build := exec.Command(goTool, "build", "-o", e.bin, "./cmd/meshrun")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	t.Cleanup(func() {
		for pid := range e.procs() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return e
}

// requireSentPerDevice runs ex under l with a trace and checks that every
// device's communication events of each kind in want sent exactly those
// bytes in total, and that no other kind of communication happened.
func (e *mpiEnv) requireSentPerDevice(t *testing.T, l mpiLauncher, ex example, want map[string]int) {
	t.Helper()
	tracePath := filepath.Join(t.TempDir(), "trace.json")
	r := e.launch(t, l, ex.size, nil, 2*time.Minute, "run", ex.path, "--launcher", "mpi", "--trace", tracePath)
	require.Equal(t, 0, r.code, "run under %s:\n%s", l.name, r.out)
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRead(t, tracePath)), &tr))
	got := map[int]map[string]int{} // device → kind → bytes
	for _, ev := range tr.TraceEvents {
		if ev.Ph != "X" || ev.Cat != "comm" {
			continue
		}
		kind, _, _ := strings.Cut(ev.Name, "(")
		if got[ev.Tid] == nil {
			got[ev.Tid] = map[string]int{}
		}
		b, _ := ev.Args["bytes_sent"].(float64)
		got[ev.Tid][kind] += int(b)
	}
	require.Len(t, got, ex.size, "every device's communication is in the trace")
	for dev, kinds := range got {
		for kind, want := range want {
			require.Equal(t, want, kinds[kind], "device %d: bytes sent by %s", dev, kind)
		}
		for kind := range kinds {
			if _, ok := want[kind]; !ok {
				t.Errorf("device %d: unexpected communication %q", dev, kind)
			}
		}
	}
}
