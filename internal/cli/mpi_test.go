//go:build linux

package cli

// The multi-process tests: the meshrun binary, built once per test run,
// started under real MPI launchers (Open MPI's mpirun.openmpi, MPICH's
// mpiexec.mpich) with one process per mesh device, against the same binary
// with --launcher local. They need Linux: they look for leftover processes
// in /proc and count file writes with inotify. Each launcher is called by
// its full name (installing MPICH repoints the plain mpirun), and a test
// skips, saying what to install, when its launcher is absent; `go test
// -short` skips them all.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/stretchr/testify/require"
)

// mpiLauncher is one way to start N processes.
type mpiLauncher struct {
	name    string   // executable, by its full name
	pkg     string   // the Debian package that installs it
	np      string   // flag for the number of processes
	args    []string // extra flags
	env     []string
	rankVar string // the variable that tells a started process its rank
}

var (
	openMPI = mpiLauncher{name: "mpirun.openmpi", pkg: "openmpi-bin", np: "-np", args: []string{"--oversubscribe"}, env: []string{
		// CI runs as root; traffic stays on shared memory and loopback,
		// without single-copy (CMA) transfers, which containers forbid.
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		"OMPI_MCA_btl=self,vader", "OMPI_MCA_oob_tcp_if_include=lo",
		"OMPI_MCA_btl_vader_single_copy_mechanism=none",
	}, rankVar: "OMPI_COMM_WORLD_RANK"}
	mpich = mpiLauncher{name: "mpiexec.mpich", pkg: "mpich", np: "-n", env: []string{"HYDRA_IFACE=lo"}, rankVar: "PMI_RANK"}
)

// need skips the test when the launcher is not installed.
func (l mpiLauncher) need(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(l.name); err != nil {
		t.Skipf("%s not found: apt-get install %s", l.name, l.pkg)
	}
}

// mpiEnv is what every test here shares: the binary and the repository root.
type mpiEnv struct {
	bin  string // the meshrun binary, at a path unique to this test run
	root string // repository root (examples are found from it)
}

// TestMPI builds meshrun once and runs every multi-process test as a
// subtest of it, so the build is shared and one cleanup can end any
// process a failed subtest left behind.
func TestMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MPI jobs; skipped with -short")
	}
	if _, err := exec.LookPath(openMPI.name); err != nil {
		if _, err2 := exec.LookPath(mpich.name); err2 != nil {
			t.Skipf("no MPI launcher (%s, %s) found: apt-get install openmpi-bin mpich", openMPI.name, mpich.name)
		}
	}
	e := buildForMPI(t)

	t0 := time.Now()
	t.Run("examples", e.testExamples)
	t.Run("mpich", e.testMPICH)
	t.Run("outputs-once", e.testOutputsOnce)
	t.Run("wrong-process-count", e.testWrongCount)
	t.Run("different-programs", e.testDifferentPrograms)
	t.Run("fault-exit", e.testFaultExit)
	t.Run("fault-sigkill", e.testFaultSigkill)
	t.Run("fault-stall-timeout", e.testStallTimeout)
	t.Logf("MPI suite: %v", time.Since(t0).Round(100*time.Millisecond))
}

// result is one finished command.
type result struct {
	code int // exit status; -1 when killed by a signal
	out  string
	took time.Duration
}

// launch runs meshrun under l with np processes. It fails the test if the
// launcher is still running after limit (a hang is a failure, not a skip).
func (e *mpiEnv) launch(t *testing.T, l mpiLauncher, np int, extraEnv []string, limit time.Duration, args ...string) result {
	t.Helper()
	full := append([]string{l.np, strconv.Itoa(np)}, l.args...)
	full = append(full, e.bin)
	full = append(full, args...)
	return e.exec(t, l.name, full, append(slices.Clone(l.env), extraEnv...), limit)
}

// local runs meshrun alone with --launcher local.
func (e *mpiEnv) local(t *testing.T, limit time.Duration, args ...string) result {
	t.Helper()
	return e.exec(t, e.bin, append(args, "--launcher", "local"), nil, limit)
}

func (e *mpiEnv) exec(t *testing.T, name string, args, env []string, limit time.Duration) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = e.root
	cmd.Env = append(cleanEnv(), env...)
	cmd.WaitDelay = 5 * time.Second // orphans holding the pipes must not hang the test
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	r := result{code: exitStatus(err), out: string(out), took: time.Since(t0)}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after %v:\n%s", name, strings.Join(args, " "), limit, out)
	}
	return r
}

// cleanEnv is this process's environment without anything that would make
// meshrun think it runs under a launcher, or inject a fault, by accident.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MESHRUN_") || strings.HasPrefix(kv, "OMPI_") ||
			strings.HasPrefix(kv, "PMI_") || strings.HasPrefix(kv, "PMIX_") || strings.HasPrefix(kv, "SLURM_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -2 // could not start
}

// example is one examples/ program with what the tests need to know of it.
type example struct {
	path  string // relative to the repository root
	size  int    // devices in its mesh: the process count
	train bool   // has a train block (compared with meshrun train)
	half  bool   // computes in bf16/f16 (looser tolerance)
}

var (
	meshDecl  = regexp.MustCompile(`(?m)^\s*mesh\s+\w+\s*=\s*\[([^\]]*)\]`)
	trainDecl = regexp.MustCompile(`(?m)^\s*train\s*\{`)
	halfDecl  = regexp.MustCompile(`(?m)^\s*precision\s*=\s*b?f16\b`)
)

// examples lists the same files as .ci/run, read from their source text
// (not from the compiler, so a compiler bug cannot hide an example).
func (e *mpiEnv) examples(t *testing.T) []example {
	t.Helper()
	var files []string
	for _, pat := range []string{"examples/*.mesh", "examples/*/*.mesh", "examples/*/*/*.mesh"} {
		m, err := filepath.Glob(filepath.Join(e.root, pat))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	var exs []example
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		m := meshDecl.FindSubmatch(src)
		require.NotNil(t, m, "%s: no `mesh NAME = [axis=N, ...]` line", f)
		size := 1
		for _, ax := range strings.Split(string(m[1]), ",") {
			_, n, ok := strings.Cut(ax, "=")
			k, err := strconv.Atoi(strings.TrimSpace(n))
			require.True(t, ok && err == nil && k > 0, "%s: mesh axis %q", f, ax)
			size *= k
		}
		rel, _ := filepath.Rel(e.root, f)
		exs = append(exs, example{path: rel, size: size, train: trainDecl.Match(src), half: halfDecl.Match(src)})
	}
	return exs
}

// Tolerances of local vs MPI. Both launchers run the same kernels on the
// same shards; only the collectives differ. The in-process ring adds the
// partial sums of a reduction in ring order, MPI_Allreduce and
// MPI_Reduce_scatter in the order of the algorithm the library picks
// (recursive doubling, Rabenseifner, ...). Float addition is not
// associative, so a reduced value may differ in its last bits (f32:
// ~1e-7 relative), and training compounds such differences over its
// steps. rtol 1e-5 leaves a hundredfold margin for that while a wrong
// shard, a missing or doubled reduction, or a rank's stale parameters
// give errors of order 1. Under bf16 (8-bit mantissa, one ulp is 2^-8 ≈
// 4e-3) the in-process ring rounds a partial sum to bf16 after every hop
// while MPI reduces in f32 and rounds once, so results differ by about a
// bf16 ulp: that example gets 1e-2.
func (ex example) tol() (rtol, atol float64) {
	if ex.half {
		return 1e-2, 1e-3
	}
	return 1e-5, 1e-6
}

// testExamples: every example gives the same outputs (run) or the same
// loss curve and final parameters (train) under --launcher local and
// under mpirun.openmpi, and `meshrun check` passes under MPI.
func (e *mpiEnv) testExamples(t *testing.T) {
	openMPI.need(t)
	for _, ex := range e.examples(t) {
		t.Run(strings.TrimSuffix(strings.TrimPrefix(ex.path, "examples/"), ".mesh"), func(t *testing.T) {
			t0 := time.Now()
			e.compareLocalMPI(t, openMPI, ex)
			r := e.launch(t, openMPI, ex.size, nil, 2*time.Minute, "check", ex.path, "--launcher", "mpi")
			require.Equal(t, 0, r.code, "check under MPI:\n%s", r.out)
			// rank 0 alone prints: one PASS line, not one per process
			require.Equal(t, 1, countLines(r.out, "PASS:"), "want exactly one PASS line:\n%s", r.out)
			t.Logf("%d processes, %v", ex.size, time.Since(t0).Round(10*time.Millisecond))
		})
	}
}

// compareLocalMPI runs ex locally and under l and compares what they write.
func (e *mpiEnv) compareLocalMPI(t *testing.T, l mpiLauncher, ex example) {
	t.Helper()
	dir := t.TempDir()
	rtol, atol := ex.tol()
	cmd, summary := "run", "ran on "
	if ex.train {
		cmd, summary = "train", "trained steps "
	}
	var outs [2]string
	for i, mode := range []string{"local", "mpi"} {
		outDir := filepath.Join(dir, mode)
		args := []string{cmd, ex.path, "--out", outDir}
		if ex.train {
			args = append(args, "--log", filepath.Join(dir, mode+".jsonl"))
		} else {
			args = append(args, "--trace", filepath.Join(dir, mode+".trace.json"))
		}
		var r result
		if mode == "local" {
			r = e.local(t, 2*time.Minute, args...)
		} else {
			r = e.launch(t, l, ex.size, nil, 2*time.Minute, append(args, "--launcher", "mpi")...)
		}
		require.Equal(t, 0, r.code, "%s %s (%s):\n%s", cmd, ex.path, mode, r.out)
		// the summary comes from rank 0's process only
		require.Equal(t, 1, countLines(r.out, summary), "%s: want one %q line:\n%s", mode, summary, r.out)
		outs[i] = outDir
	}
	compareNpyDirs(t, outs[0], outs[1], rtol, atol)
	if ex.train {
		compareLossLogs(t, filepath.Join(dir, "local.jsonl"), filepath.Join(dir, "mpi.jsonl"), rtol, atol)
	} else {
		// every device's timeline: the same instructions, and the same
		// bytes sent by each (MPI's figures are the ring's, byte for byte)
		require.Equal(t, traceBytes(t, filepath.Join(dir, "local.trace.json")), traceBytes(t, filepath.Join(dir, "mpi.trace.json")))
	}
}

// traceBytes lists a Chrome trace's instruction events as "device name
// bytes_sent" (the in-process ring's steps are left out: MPI's collectives
// are the library's own algorithms).
func traceBytes(t *testing.T, path string) []string {
	t.Helper()
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ph   string         `json:"ph"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRead(t, path)), &tr))
	var out []string
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.Cat != "ring" {
			out = append(out, fmt.Sprintf("%d %s %v", e.Tid, e.Name, e.Args["bytes_sent"]))
		}
	}
	require.NotEmpty(t, out)
	return out
}

// countLines counts the lines of out that start with prefix.
func countLines(out, prefix string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}

// compareNpyDirs checks that two --out directories hold the same .npy
// files with the same shapes and dtypes and values within tolerance.
func compareNpyDirs(t *testing.T, want, got string, rtol, atol float64) {
	t.Helper()
	names := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		var n []string
		for _, e := range ents {
			n = append(n, e.Name())
		}
		return n
	}
	wn, gn := names(want), names(got)
	require.NotEmpty(t, wn, "the local run wrote no outputs")
	require.Equal(t, wn, gn, "the MPI run wrote other files than the local run")
	worst := 0.0
	for _, n := range wn {
		require.True(t, strings.HasSuffix(n, ".npy"), "unexpected file %s", n)
		hw, dw, err := npy.ReadFile(filepath.Join(want, n))
		require.NoError(t, err)
		hg, dg, err := npy.ReadFile(filepath.Join(got, n))
		require.NoError(t, err)
		require.Equal(t, hw.Shape, hg.Shape, "%s: shape", n)
		require.Equal(t, hw.Descr, hg.Descr, "%s: dtype", n)
		a, b := floats(t, dw), floats(t, dg)
		for i := range a {
			d := math.Abs(a[i] - b[i])
			require.True(t, d <= atol+rtol*math.Abs(a[i]),
				"%s[%d]: local %g, mpi %g (|diff| %g > atol %g + rtol %g·|local|)", n, i, a[i], b[i], d, atol, rtol)
			worst = max(worst, d/(atol+rtol*math.Abs(a[i])))
		}
	}
	t.Logf("%d output files equal; worst diff %.3g of the tolerance", len(wn), worst)
}

func floats(t *testing.T, data any) []float64 {
	t.Helper()
	var out []float64
	switch d := data.(type) {
	case []float32:
		for _, v := range d {
			out = append(out, float64(v))
		}
	case []float64:
		out = d
	case []int32:
		for _, v := range d {
			out = append(out, float64(v))
		}
	case []int64:
		for _, v := range d {
			out = append(out, float64(v))
		}
	default:
		t.Fatalf("unexpected .npy data %T", data)
	}
	return out
}

// logStep is one line of `meshrun train --log`.
type logStep struct {
	Step int     `json:"step"`
	Loss float64 `json:"loss"`
	LR   float64 `json:"lr"`
}

func readLossLog(t *testing.T, path string) []logStep {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var steps []logStep
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var s logStep
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), "%s: line %q", path, sc.Text())
		steps = append(steps, s)
	}
	return steps
}

// compareLossLogs checks the same steps in the same order, the same
// learning rates (the schedule involves no communication: exact) and the
// losses within tolerance.
func compareLossLogs(t *testing.T, want, got string, rtol, atol float64) {
	t.Helper()
	w, g := readLossLog(t, want), readLossLog(t, got)
	require.NotEmpty(t, w)
	require.Len(t, g, len(w), "the MPI log has another number of steps")
	for i := range w {
		require.Equal(t, w[i].Step, g[i].Step, "line %d", i+1)
		require.Equal(t, w[i].LR, g[i].LR, "step %d: lr", w[i].Step)
		d := math.Abs(w[i].Loss - g[i].Loss)
		require.True(t, d <= atol+rtol*math.Abs(w[i].Loss), "step %d: loss local %g, mpi %g", w[i].Step, w[i].Loss, g[i].Loss)
	}
}

// testMPICH: MPICH has another ABI than Open MPI (integer handles, not
// addresses of globals); one run and one training example under it.
func (e *mpiEnv) testMPICH(t *testing.T) {
	mpich.need(t)
	found := 0
	for _, ex := range e.examples(t) {
		if ex.path != "examples/dp_tp_block.mesh" && ex.path != "examples/train/megatron_dp_tp.mesh" {
			continue
		}
		found++
		t.Run(strings.TrimSuffix(filepath.Base(ex.path), ".mesh"), func(t *testing.T) {
			e.compareLocalMPI(t, mpich, ex)
			r := e.launch(t, mpich, ex.size, nil, time.Minute, "check", ex.path, "--launcher", "mpi")
			require.Equal(t, 0, r.code, "check under MPICH:\n%s", r.out)
			require.Equal(t, 1, countLines(r.out, "PASS:"), "want exactly one PASS line:\n%s", r.out)
		})
	}
	require.Equal(t, 2, found, "the MPICH examples were renamed: pick others")
}

// writeWatch counts, with inotify, how often each file in some
// directories is completed: closed after being opened for writing
// (IN_CLOSE_WRITE: a file written in place, like the --log) or renamed
// into place (IN_MOVED_TO: the .npy files, the plot and the checkpoint are
// written to a temporary file, then renamed). A file written by every
// rank's process, not by rank 0's alone, is counted once per process.
// inotify merges an event with an identical unread one before it; a
// goroutine reads events as they come so that two processes' closes are
// rarely merged, and renames never are (each has its own cookie).
type writeWatch struct {
	f    *os.File
	dirs map[int32]string
	mu   sync.Mutex
	n    map[string]int
	done chan struct{}
}

func watchWrites(t *testing.T, dirs ...string) *writeWatch {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	require.NoError(t, err)
	w := &writeWatch{dirs: map[int32]string{}, n: map[string]int{}, done: make(chan struct{})}
	for _, d := range dirs {
		wd, err := syscall.InotifyAddWatch(fd, d, syscall.IN_CLOSE_WRITE|syscall.IN_MOVED_TO)
		require.NoError(t, err)
		w.dirs[int32(wd)] = d
	}
	// non-blocking, so os.File reads through the poller and honour deadlines
	w.f = os.NewFile(uintptr(fd), "inotify")
	t.Cleanup(func() { w.f.Close() })
	go w.read()
	return w
}

func (w *writeWatch) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		w.mu.Lock()
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			ln := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+ln], "\x00"))
			off += syscall.SizeofInotifyEvent + ln
			if mask&syscall.IN_Q_OVERFLOW != 0 {
				w.n["<overflow>"]++
			}
			if name != "" {
				w.n[filepath.Join(w.dirs[wd], name)]++
			}
		}
		w.mu.Unlock()
	}
}

// writes stops watching (every writer has exited by then, so every event
// is queued) and returns the counts of the files that exist now; the
// temporary files, renamed away, are left out.
func (w *writeWatch) writes(t *testing.T) map[string]int {
	t.Helper()
	w.f.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Zero(t, w.n["<overflow>"], "inotify queue overflowed")
	got := map[string]int{}
	for p, k := range w.n {
		if _, err := os.Stat(p); err == nil {
			got[p] = k
		}
	}
	return got
}

// listDir names every entry under dir, recursively, relative to it.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		names = append(names, rel)
		return nil
	}))
	sort.Strings(names)
	return names
}

// testOutputsOnce: under MPI, --out, --log, --plot, --save (train) and
// --out, --trace (run) are written once, by one process, into exactly the
// files a local run writes; the checkpoint resumes locally.
func (e *mpiEnv) testOutputsOnce(t *testing.T) {
	openMPI.need(t)
	ex := "examples/train/mlp_dp.mesh" // [dp=4], 20 steps, params W and c
	dir := t.TempDir()
	full, part := filepath.Join(dir, "full"), filepath.Join(dir, "part")
	for _, d := range []string{full, part, full + "/out", full + "/ck", part + "/ck"} {
		require.NoError(t, os.Mkdir(d, 0o755)) // watched directories must exist
	}

	// the whole training run, every file flag
	w := watchWrites(t, full, full+"/out", full+"/ck")
	r := e.launch(t, openMPI, 4, nil, time.Minute, "train", ex, "--launcher", "mpi", "--out", full+"/out",
		"--log", full+"/loss.jsonl", "--plot", full+"/loss.png", "--save", full+"/ck")
	require.Equal(t, 0, r.code, r.out)
	require.Equal(t, map[string]int{
		full + "/out/W.npy": 1, full + "/out/c.npy": 1, full + "/loss.jsonl": 1, full + "/loss.png": 1,
		full + "/ck/checkpoint.safetensors": 1,
	}, w.writes(t), "files and how often each was written")
	require.Equal(t, []string{"ck", "ck/checkpoint.safetensors", "loss.jsonl", "loss.png", "out", "out/W.npy", "out/c.npy"},
		listDir(t, full), "no temporary, per-rank or extra files")
	fullLog := readLossLog(t, full+"/loss.jsonl")
	require.Len(t, fullLog, 20)
	for i, s := range fullLog {
		require.Equal(t, i+1, s.Step, "the log holds each step once, in order")
	}

	// stopped after step 9 with a checkpoint, then resumed locally: it
	// continues at step 10 and ends where the uninterrupted MPI run ended
	w = watchWrites(t, part, part+"/ck")
	r = e.launch(t, openMPI, 4, nil, time.Minute, "train", ex, "--launcher", "mpi", "--log", part+"/loss.jsonl", "--save", part+"/ck", "--stop-at", "9")
	require.Equal(t, 0, r.code, r.out)
	require.Equal(t, 1, countLines(r.out, "stopped after step 9 of 20"), r.out)
	require.Equal(t, map[string]int{part + "/loss.jsonl": 1, part + "/ck/checkpoint.safetensors": 1}, w.writes(t))
	require.Len(t, readLossLog(t, part+"/loss.jsonl"), 9)
	r = e.local(t, time.Minute, "train", ex, "--resume", part+"/ck", "--out", part+"/resumed", "--log", part+"/resumed.jsonl")
	require.Equal(t, 0, r.code, r.out)
	require.Contains(t, r.out, "trained steps 10 to 20")
	compareNpyDirs(t, full+"/out", part+"/resumed", 1e-5, 1e-6) // f32: see example.tol
	resumed := readLossLog(t, part+"/resumed.jsonl")
	require.Len(t, resumed, 11)
	for i, s := range resumed {
		require.Equal(t, fullLog[9+i].Step, s.Step)
		require.InEpsilon(t, fullLog[9+i].Loss, s.Loss, 1e-5, "step %d", s.Step)
	}

	// run: outputs and the trace
	rd := filepath.Join(dir, "run")
	require.NoError(t, os.MkdirAll(rd+"/out", 0o755))
	w = watchWrites(t, rd, rd+"/out")
	r = e.launch(t, openMPI, 4, nil, time.Minute, "run", "examples/dp_tp_block.mesh", "--launcher", "mpi", "--out", rd+"/out", "--trace", rd+"/trace.json")
	require.Equal(t, 0, r.code, r.out)
	require.Equal(t, map[string]int{rd + "/out/y.npy": 1, rd + "/trace.json": 1}, w.writes(t))
	require.Equal(t, []string{"out", "out/y.npy", "trace.json"}, listDir(t, rd))
	var trace any
	require.NoError(t, json.Unmarshal([]byte(mustRead(t, rd+"/trace.json")), &trace), "the trace is one valid JSON document")
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

// testWrongCount: a process count other than the mesh size is refused
// with exit 2 and one message naming the mesh size, and nothing written.
// A process that compiled another program than rank 0's (here: another
// seed, as a stale file or other flags on one host would) is refused at
// start-up, naming itself, instead of running to a silently wrong answer.
func (e *mpiEnv) testDifferentPrograms(t *testing.T) {
	openMPI.need(t)
	wrapper := filepath.Join(t.TempDir(), "rank1-seed5.sh")
	script := "#!/bin/sh\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec " + e.bin + " \"$@\" --seed 5; fi\nexec " + e.bin + " \"$@\"\n"
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	full := append([]string{openMPI.np, "4"}, openMPI.args...)
	full = append(full, wrapper, "run", "examples/dp_mlp.mesh", "--launcher", "mpi")
	r := e.exec(t, openMPI.name, full, openMPI.env, time.Minute)
	require.NotEqual(t, 0, r.code, r.out)
	require.Contains(t, r.out, "rank 1: meshrun: starting the MPI run: this process compiled another program than rank 0's", r.out)
	require.NotContains(t, r.out, "ran on 4 devices", r.out)
	e.noLeftovers(t)
}

func (e *mpiEnv) testWrongCount(t *testing.T) {
	for _, l := range []mpiLauncher{openMPI, mpich} {
		t.Run(l.name, func(t *testing.T) {
			l.need(t)
			for _, np := range []int{3, 5} { // dp_mlp's mesh has 4 devices
				out := filepath.Join(t.TempDir(), "out")
				r := e.launch(t, l, np, nil, time.Minute, "run", "examples/dp_mlp.mesh", "--launcher", "mpi", "--out", out)
				require.Equal(t, 2, r.code, "-np %d:\n%s", np, r.out)
				msg := fmt.Sprintf("started %d processes, but the mesh [dp=4] has 4 devices: start one process per device (e.g. mpirun -np 4)", np)
				require.Equal(t, 1, strings.Count(r.out, msg), "-np %d: want the message once:\n%s", np, r.out)
				require.NoDirExists(t, out)
			}
		})
	}
}

// The failure-injection program: instruction 3 of every rank is an
// all-reduce over tp, groups {0,1} and {2,3}, for the to() on line 12.
const faultMesh = "internal/cli/testdata/mpi/fault.mesh"

// checkFaultProgram guards the instruction number the fault tests use.
func (e *mpiEnv) checkFaultProgram(t *testing.T) {
	t.Helper()
	r := e.local(t, time.Minute, "run", faultMesh, "--dump-after", "spmd")
	require.Equal(t, 0, r.code, r.out)
	require.Regexp(t, `(?m)^\s*s3 = all_reduce\(h\)\(s2\) .* g0\b`, r.out,
		"instruction 3 of %s is no longer its all-reduce: update the fault tests", faultMesh)
}

// lostRank matches what Open MPI's mpirun says about the process of rank
// r when it exited non-zero or was killed.
func lostRank(r int) string {
	return fmt.Sprintf(`Process name: \[\[\d+,\d+\],%d\]|process rank %d with PID`, r, r)
}

// procs finds the live processes of this run's meshrun binary: pid → the
// rank their launcher gave them (-1 if none).
func (e *mpiEnv) procs() map[int]int {
	found := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		if exe != e.bin && argv0 != e.bin {
			continue
		}
		found[pid] = -1
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(environ), "\x00") {
			for _, v := range []string{openMPI.rankVar, mpich.rankVar} {
				if r, ok := strings.CutPrefix(kv, v+"="); ok {
					found[pid], _ = strconv.Atoi(r)
				}
			}
		}
	}
	return found
}

// noLeftovers fails if a meshrun process outlives its launcher (after a
// moment for the kernel to reap the last ones).
func (e *mpiEnv) noLeftovers(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := e.procs()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("meshrun processes left behind (pid → rank): %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testFaultExit: rank 2 exits (code 3) just before the all-reduce. The
// others, with a 30 s collective timeout, must be ended by MPI_Abort/the
// launcher within seconds, and the output must name rank 2.
func (e *mpiEnv) testFaultExit(t *testing.T) {
	openMPI.need(t)
	e.checkFaultProgram(t)
	r := e.launch(t, openMPI, 4, []string{"MESHRUN_TEST_FAULT=2:3:exit"}, time.Minute, "run", faultMesh, "--launcher", "mpi", "--timeout", "30s")
	require.NotEqual(t, 0, r.code, r.out)
	require.Less(t, r.took, 15*time.Second, "ended by the 30 s timeout, not by the lost rank:\n%s", r.out)
	require.Contains(t, r.out, "rank 2: meshrun: test fault exit at instruction 3")
	require.Regexp(t, lostRank(2), r.out, "the launcher names the lost rank")
	require.NotContains(t, r.out, "ran on ", "no rank may finish")
	e.noLeftovers(t)
	t.Logf("exit %d after %v", r.code, r.took.Round(time.Millisecond))
}

// syncBuffer collects a running command's output for polling.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a launcher started in the background.
type running struct {
	cmd    *exec.Cmd
	out    syncBuffer
	waited chan error
	start  time.Time
}

func (e *mpiEnv) start(t *testing.T, l mpiLauncher, np int, extraEnv []string, args ...string) *running {
	t.Helper()
	full := append([]string{l.np, strconv.Itoa(np)}, l.args...)
	full = append(full, e.bin)
	full = append(full, args...)
	r := &running{cmd: exec.Command(l.name, full...), waited: make(chan error, 1)}
	r.cmd.Dir = e.root
	r.cmd.Env = append(append(cleanEnv(), l.env...), extraEnv...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	r.cmd.WaitDelay = 5 * time.Second
	require.NoError(t, r.cmd.Start())
	r.start = time.Now()
	go func() { r.waited <- r.cmd.Wait() }()
	t.Cleanup(func() { r.cmd.Process.Kill() }) // the launcher, if a check failed first
	return r
}

// waitFor polls the output until it contains s.
func (r *running) waitFor(t *testing.T, s string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(r.out.String(), s) {
		require.True(t, time.Now().Before(deadline), "no %q after %v:\n%s", s, limit, r.out.String())
		time.Sleep(20 * time.Millisecond)
	}
}

// end waits for the launcher to exit, and for every meshrun process to be
// gone, within limit. It returns the launcher's exit status, when the last
// meshrun process was seen, and whether the launcher hung: Open MPI 4.1's
// mpirun (Debian's 4.1.4 here), after a rank's MPI_Abort, now and then
// stays in PMIx_server_finalize for good (or segfaults there) although
// every rank is gone, about one run in six on this machine (MPICH's
// mpiexec: never in the same runs). Where hungOK, a launcher still
// running 10 s after its last rank is killed and reported instead of
// failing the test: the ranks' side (the message, the abort, no process
// left) is still checked.
func (e *mpiEnv) end(t *testing.T, r *running, limit time.Duration, hungOK bool) (code int, ranksGone time.Time, hung bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	ranksGone = time.Now()
	seen := false // a hang is only a hang after the ranks ran
	for {
		alive := len(e.procs()) > 0
		if alive {
			seen, ranksGone = true, time.Now()
		}
		select {
		case err := <-r.waited:
			e.noLeftovers(t)
			if alive {
				ranksGone = time.Now() // alive at the last look, gone now
			}
			return exitStatus(err), ranksGone, false
		case <-time.After(50 * time.Millisecond):
		}
		if hungOK && seen && !alive && time.Since(ranksGone) > 10*time.Second {
			r.cmd.Process.Kill()
			<-r.waited
			t.Logf("known Open MPI mpirun hang: every rank gone for 10 s, %s still running; killed it", r.cmd.Path)
			return -1, ranksGone, true
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after %v (meshrun pid → rank %v):\n%s", limit, e.procs(), r.out.String())
		}
	}
}

// testFaultSigkill: rank 2 is parked before the all-reduce (stall mode),
// so rank 3 waits in that collective and rank 0 for rank 2's output;
// then rank 2's process is killed with SIGKILL, as an OOM killer or a
// crash would. With a 60 s timeout, only the launcher noticing the death
// can end the others within seconds; it must name rank 2, and no process
// may be left.
func (e *mpiEnv) testFaultSigkill(t *testing.T) {
	openMPI.need(t)
	e.checkFaultProgram(t)
	r := e.start(t, openMPI, 4, []string{"MESHRUN_TEST_FAULT=2:3:stall"}, "run", faultMesh, "--launcher", "mpi", "--timeout", "60s")
	r.waitFor(t, "rank 2: meshrun: test fault stall at instruction 3", 30*time.Second)
	time.Sleep(time.Second) // the others reach the all-reduce (one tiny matmul before it)
	victim := -1
	procs := e.procs()
	for pid, rank := range procs {
		if rank == 2 {
			victim = pid
		}
	}
	require.Len(t, procs, 4, "want the 4 ranks alive, parked; got pid → rank %v", procs)
	require.NotEqual(t, -1, victim, "no process of rank 2 in %v", procs)
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	killed := time.Now()
	// Open MPI's mpirun sometimes hangs once every rank is gone (seen once
	// in a full test run at load 4-8: the ranks ended 1 s after the kill,
	// mpirun never did): what is tested is that the ranks end, so the hang
	// is tolerated as in testStallTimeout, and the time is the ranks'.
	code, gone, hung := e.end(t, r, 30*time.Second, true)
	took := gone.Sub(killed)
	o := r.out.String()
	if !hung {
		require.NotEqual(t, 0, code, o)
	}
	require.Less(t, took, 15*time.Second, "ended by the 60 s timeout, not by the lost rank:\n%s", o)
	require.Regexp(t, lostRank(2), o, "the launcher names the lost rank")
	require.NotContains(t, o, "timed out", "ended by a timeout, not by the launcher:\n%s", o)
	require.NotContains(t, o, "ran on ", "no rank may finish")
	t.Logf("ended %v after the SIGKILL: exit %d", took.Round(time.Millisecond), code)
}

// testStallTimeout: rank 1 stalls before the all-reduce over tp; with
// --timeout 2s rank 0, its group's other member, must time out with an
// error naming the collective, its source line and the group's ranks,
// then end the run with MPI_Abort, the stalled process included. (Rank 1,
// not 2: with rank 2 stalled, rank 0 waits for rank 2's output at the
// same time as rank 3 waits in the all-reduce, and whichever times out
// first aborts the other before it prints.) Under both launchers when
// present (MPICH first: its launcher never hung here).
func (e *mpiEnv) testStallTimeout(t *testing.T) {
	for _, l := range []mpiLauncher{mpich, openMPI} {
		t.Run(l.name, func(t *testing.T) {
			l.need(t)
			e.checkFaultProgram(t)
			r := e.start(t, l, 4, []string{"MESHRUN_TEST_FAULT=1:3:stall"}, "run", faultMesh, "--launcher", "mpi", "--timeout", "2s")
			code, gone, hung := e.end(t, r, 40*time.Second, l.name == openMPI.name)
			o := r.out.String()
			require.Contains(t, o, "rank 1: meshrun: test fault stall at instruction 3")
			require.True(t, hasLineWith(o, "meshrun: run failed", "fault.mesh:12:5", "device 0 ", "all_reduce over tp", "timed out after 2s", "ranks [0 1]"),
				"want rank 0's timeout naming the all-reduce, its line and the group [0 1]:\n%s", o)
			// 2 s timeout, then the abort: every rank gone well within 15 s
			require.Less(t, gone.Sub(r.start), 15*time.Second, "the ranks outlived the timeout:\n%s", o)
			require.NotContains(t, o, "ran on ", "no rank may finish")
			if !hung {
				require.NotEqual(t, 0, code, o)
			}
			t.Logf("exit %d; ranks gone %v after the start", code, gone.Sub(r.start).Round(time.Millisecond))
		})
	}
}

// hasLineWith reports whether one line of out contains every part.
func hasLineWith(out string, parts ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}
