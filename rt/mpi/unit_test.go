package mpi

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// These tests need no MPI library.

func envOf(kv map[string]string) (func(string) string, []string) {
	var environ []string
	for k, v := range kv {
		environ = append(environ, k+"="+v)
	}
	return func(k string) string { return kv[k] }, environ
}

func TestCandidatesFollowTheLauncher(t *testing.T) {
	first := func(kv map[string]string) string {
		return candidates(envOf(kv))[0]
	}
	if got := first(map[string]string{"MESHRUN_MPI_LIB": "/x/libmpi.so"}); got != "/x/libmpi.so" {
		t.Errorf("override: first candidate %q", got)
	}
	if got := candidates(envOf(map[string]string{"MESHRUN_MPI_LIB": "/x", "PMI_RANK": "0"})); len(got) != 1 {
		t.Errorf("override must be the only candidate, got %v", got)
	}
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, "libmpi.so.40"},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "4"}, "libmpi.so.40"},
		{map[string]string{"PMI_RANK": "1"}, "libmpich.so.12"},
		{map[string]string{"PMI_SIZE": "4"}, "libmpich.so.12"},
		{map[string]string{"HYDRA_CONTROL_FD": "7"}, "libmpich.so.12"},
		// Open MPI's own variables win over a stray PMI_* (e.g. under Slurm).
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "PMI_RANK": "1"}, "libmpi.so.40"},
	}
	for _, c := range cases {
		got := candidates(envOf(c.env))
		if got[0] != c.want {
			t.Errorf("%v: first candidate %q, want %q", c.env, got[0], c.want)
		}
		if len(got) != 6 || !slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, "/libmpich.so.12") }) {
			t.Errorf("%v: want both libraries' paths, got %v", c.env, got)
		}
	}
}

func TestLauncherInfo(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want LaunchInfo
	}{
		{map[string]string{}, LaunchInfo{"", -1, -1, -1, -1}},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "SLURM_PROCID": "0"},
			LaunchInfo{"openmpi", 3, 8, 1, 2}},
		{map[string]string{"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4"},
			LaunchInfo{"hydra", 2, 4, 2, 4}},
		{map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"},
			LaunchInfo{"slurm", 5, 6, 1, -1}},
		{map[string]string{"PMI_RANK": "x"}, LaunchInfo{"hydra", -1, -1, -1, -1}},
	}
	for _, c := range cases {
		if got := launcherFrom(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: got %+v, want %+v", c.env, got, c.want)
		}
	}
}

func TestMissingLibraryIsOneClearLine(t *testing.T) {
	t.Setenv("MESHRUN_MPI_LIB", "/nonexistent/libmpi-missing.so")
	err := load() // not Load: that caches its first answer for the process
	if err == nil {
		t.Fatal("loading a missing library succeeded")
	}
	msg := err.Error()
	if errors.Is(err, errNoCgo) {
		t.Skip(msg)
	}
	if !strings.Contains(msg, "/nonexistent/libmpi-missing.so") || strings.Contains(msg, "\n") {
		t.Errorf("want one line naming the path, got %q", msg)
	}
}

func TestOpenMPIHandleTable(t *testing.T) {
	syms := map[string]uintptr{}
	for i, s := range openMPISymbols {
		syms[s.names[len(s.names)-1]] = uintptr(0x1000 + 16*i) // the fallback names only
	}
	h, err := openMPIHandles(func(n string) uintptr { return syms[n] })
	if err != nil {
		t.Fatal(err)
	}
	if h.world != 0x1000 || h.types[dtInt64] == 0 || h.max == 0 || h.anySource != -1 || h.procNull != -2 {
		t.Errorf("table not filled: %+v", h)
	}
	delete(syms, "ompi_mpi_op_sum")
	if _, err := openMPIHandles(func(n string) uintptr { return syms[n] }); err == nil || !strings.Contains(err.Error(), "ompi_mpi_op_sum") {
		t.Errorf("missing symbol not named: %v", err)
	}
}

func TestDetectABI(t *testing.T) {
	none := func(string) uintptr { return 0 }
	ompi := func(n string) uintptr {
		if n == "ompi_mpi_comm_world" {
			return 0x1000
		}
		return 0
	}
	if k, err := detectABI(ompi, ""); k != abiOpenMPI || err != nil {
		t.Errorf("Open MPI: %v %v", k, err)
	}
	if k, err := detectABI(none, "MPICH Version:\t4.0.2\nMPICH Release date: ..."); k != abiMPICH || err != nil {
		t.Errorf("MPICH: %v %v", k, err)
	}
	if _, err := detectABI(none, "Some Other MPI 1.0\nmore"); err == nil || strings.Contains(err.Error(), "more") {
		t.Errorf("unknown library: %v", err)
	}
}

func TestLayout(t *testing.T) {
	c := &Comm{size: 4}
	cnt, disp, total, err := layout("X", c, []int{3, 0, 5, 1})
	if err != nil || total != 9 || !slices.Equal(cnt, []int32{3, 0, 5, 1}) || !slices.Equal(disp, []int32{0, 3, 3, 8}) {
		t.Errorf("got %v %v %d %v", cnt, disp, total, err)
	}
	if _, _, _, err := layout("X", c, []int{1, 2, 3}); err == nil {
		t.Error("3 counts for 4 ranks accepted")
	}
	if _, _, _, err := layout("X", c, []int{1, -2, 3, 4}); err == nil {
		t.Error("negative count accepted")
	}
}

func TestTimeoutErrorNamesTheOperation(t *testing.T) {
	err := error(&TimeoutError{Op: "Allreduce", After: 1500 * time.Millisecond, Cause: context.DeadlineExceeded})
	if !strings.Contains(err.Error(), "Allreduce timed out after 1.5s") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %q", err)
	}
	err = &TimeoutError{Op: "Recv", Cause: context.Canceled}
	if !strings.Contains(err.Error(), "Recv was cancelled") {
		t.Errorf("got %q", err)
	}
}

func TestCallsBeforeInitFail(t *testing.T) {
	if Initialized() {
		t.Skip("MPI initialised in this process")
	}
	c := &Comm{size: 1, h: 1}
	if err := Allreduce(context.Background(), c, nil, []float32{1}, Sum); err == nil || !strings.Contains(err.Error(), "not initialised") {
		t.Errorf("Allreduce before Init: %v", err)
	}
	if err := (&Comm{world: true}).Free(); err == nil {
		t.Error("freeing the world succeeded")
	}
	if World() != nil {
		t.Error("World before Init is not nil")
	}
}

// TestLoad opens the real library when there is one, without initialising
// MPI (that is left to the processes mpirun starts).
func TestLoad(t *testing.T) {
	if err := Load(); err != nil {
		t.Skipf("no MPI library: %v", err)
	}
	path, abi, version := Library()
	t.Logf("loaded %s (%s): %s", path, abi, version)
	if abi != "Open MPI" && abi != "MPICH" {
		t.Errorf("ABI %q", abi)
	}
	if lib.h.world == 0 || lib.h.types[dtFloat64] == 0 || lib.h.sum == 0 {
		t.Errorf("handles not resolved: %+v", lib.h)
	}
}

func TestMPIErrorTextOnOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"Message truncated, error stack:\n(unknown)(): Message truncated": "Message truncated",
		"MPI_ERR_TRUNCATE: message truncated":                             "MPI_ERR_TRUNCATE: message truncated",
		"two\nlines ":                                                     "two lines",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
