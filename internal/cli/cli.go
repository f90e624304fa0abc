// Package cli implements the meshrun subcommands. It is separate from
// cmd/meshrun so tests can drive every command in-process and check its
// output and exit code.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/internal/atomicfile"
	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/rt"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // a run failed, or check found a mismatch
	ExitUsage   = 2 // bad usage or a compile error
)

const usage = `meshrun — placements over a device mesh, checked against one device

usage:
  meshrun run FILE [flags]       run the program on the mesh's virtual devices
  meshrun check FILE [flags]     run on the mesh and on one device; compare every output
  meshrun explain FILE [flags]   placements, inserted collectives, bytes, costs, memory
  meshrun train FILE [flags]     run the program's train block; write params, a loss log and plot
  meshrun trace FILE [flags]     one step's timeline: Chrome trace, a pipeline's Gantt chart and bubble
  meshrun estimate [flags]       ZeRO memory, bytes and seconds per step for a model size, without running
  meshrun gemm [flags]           1D, 2D, 2.5D and 3D parallel GEMM compared: memory, bytes, messages, time, formulas
  meshrun plan FILE [flags]      search mesh sizes, pipeline, ZeRO, checkpointing, micro-batches: the fastest that fit
  meshrun repl [flags]           interactive sharding experiments
  meshrun devices                the NVIDIA GPUs NVML sees: memory, compute capability, PCI, NVLink topology
  meshrun grammar                print the grammar (EBNF, generated from the parser)

Run 'meshrun COMMAND --help' for a command's flags.
Exit codes: 0 ok, 1 run or check failure, 2 usage or compile error.
`

// Main runs one command line and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	env := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	switch args[0] {
	case "run":
		env.quietFollower()
		return env.finish(env.run(args[1:]))
	case "check":
		env.quietFollower()
		return env.finish(env.check(args[1:]))
	case "explain":
		return env.explain(args[1:])
	case "repl":
		return env.repl(args[1:])
	case "train":
		env.quietFollower()
		return env.finish(env.train(args[1:]))
	case "estimate":
		return env.estimate(args[1:])
	case "gemm":
		return env.gemm(args[1:])
	case "plan":
		return env.plan(args[1:])
	case "trace":
		return env.trace(args[1:])
	case "devices":
		return env.devices(args[1:])
	case "grammar":
		return env.grammar(args[1:])
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "meshrun: unknown command %q\n\n%s", args[0], usage)
	return ExitUsage
}

type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// Under an MPI launcher: this process's launcher once MPI started, and
	// whether this is a rank other than 0 (stdout silenced, stderr
	// prefixed with the rank).
	mpi      *rt.MPI
	follower bool
	// Under the rendezvous launcher: this process's launcher.
	rendezvous *rt.MPI
}

// common are the flags every program-taking command has.
type common struct {
	devices   int
	seed      uint64
	timeout   time.Duration
	alphaUs   float64
	bandwidth float64
	links     string
	verify    bool
	dumpAfter string
	launcher  string
	backend   string // --backend, on the commands that run a plan (registerBackend)
	tf32      bool   // --tf32: the GPU's f32 matmuls in TF32
	schedule  string // overrides the train block's pipeline schedule (trace --schedules)
	memory    memoryFlag
	bucket    bucketFlag
	gpus      *hostGPUs // this host's GPUs, once --link gpus has read them
	// judgeMemoryOnlyIfSet: apply --memory but no default budget (explain)
	judgeMemoryOnlyIfSet bool
	// deviceTime: the run's timeline is shown (run --trace, trace), so a
	// GPU times it with its events (rt.Options.DeviceTime)
	deviceTime bool
	// opened is the backend trace opened once for all its runs (nil: the
	// CPU's)
	opened rt.Backend
	// moreGPUs are the GPUs after the first the local launcher's ranks
	// are spread over (localBackends), opened once per command
	moreGPUs []*cuda.Backend
}

func (c *common) register(fs *flag.FlagSet) {
	fs.IntVar(&c.devices, "devices", 64, "virtual CPU devices available; a larger mesh is an error")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the random initialisers")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "how long a collective waits for its peers")
	fs.Float64Var(&c.alphaUs, "alpha", mesh.DefaultLink.Alpha*1e6, "link latency in microseconds (cost model)")
	fs.Float64Var(&c.bandwidth, "bandwidth", 1/mesh.DefaultLink.Beta/1e9, "link bandwidth in GB/s (cost model)")
	fs.StringVar(&c.links, "link", "", "per-axis links, e.g. 'dp=25:12.5,tp=5:100' (alpha us : GB/s); gpus: from this host's GPUs (NVML), e.g. 'gpus,dp=25:12.5'")
	fs.BoolVar(&c.verify, "verify", false, "run the plan verifier after every lowering pass")
	fs.StringVar(&c.dumpAfter, "dump-after", "", "print the plan after this lowering pass ("+strings.Join(passNames(), ", ")+") or all")
	fs.StringVar(&c.launcher, "launcher", "auto", "local (every device a goroutine here), mpi (one process per device under mpirun/srun), rendezvous (one process per device, from MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK), or auto")
	fs.Var(&c.memory, "memory", "memory budget per device, e.g. 16GiB; a plan whose peak exceeds it is an error (0: none)")
	fs.Var(&c.bucket, "bucket", "cap of a bucket of collectives launched together, per device, e.g. 4MiB; default 25MiB, DDP's bucket_cap_mb (0: every collective on its own)")
}

// topology builds the link model of a graph's mesh from the flags. A
// pipeline axis is not in that mesh: the cost model prices the sends
// between stages on the default link, and --link says so if named.
// `--link gpus` reads the links from this host's GPUs (links_gpu.go),
// with a note per axis on notes; the axes --link names beside it keep
// what it gives them.
func (c *common) topology(g *ir.Graph, notes io.Writer) (*mesh.Topology, error) {
	m := g.Mesh
	def := mesh.Link{Alpha: c.alphaUs * 1e-6, Beta: 1 / (c.bandwidth * 1e9), Gamma: mesh.DefaultLink.Gamma}
	t := mesh.Uniform(m, def)
	links, gpus := splitGPUs(c.links)
	set := map[int]bool{}
	if links != "" {
		if err := c.explicitLinks(g, t, links, def, set); err != nil {
			return nil, err
		}
	}
	if gpus {
		if c.gpus == nil { // read once: the REPL asks for every statement
			h, err := readHostGPUs(newGPUSource())
			if err != nil {
				return nil, fmt.Errorf("--link gpus: %w", err)
			}
			c.gpus = h
		}
		gpuTopology(t, g, c.gpus, set, notes)
	}
	return t, nil
}

// explicitLinks sets the links --link names (AXIS=ALPHA_US:GBPS, comma
// separated), recording each axis it sets in set.
func (c *common) explicitLinks(g *ir.Graph, t *mesh.Topology, links string, def mesh.Link, set map[int]bool) error {
	m := g.Mesh
	for _, part := range strings.Split(links, ",") {
		name, spec, ok := strings.Cut(part, "=")
		a := m.AxisIndex(strings.TrimSpace(name))
		if p := g.Pipeline; ok && a < 0 && p != nil && p.Full.Axes[p.Axis].Name == strings.TrimSpace(name) {
			return fmt.Errorf("--link %q: %s is the pipeline axis, whose sends between stages the cost model prices on the default link (%g us, %g GB/s); --link sets the other axes", c.links, strings.TrimSpace(name), mesh.DefaultLink.Alpha*1e6, 1/mesh.DefaultLink.Beta/1e9)
		}
		if !ok || a < 0 {
			return fmt.Errorf("--link %q: unknown mesh axis %q", c.links, name)
		}
		var alpha, bw float64
		// written so that NaN fails too
		if _, err := fmt.Sscanf(spec, "%g:%g", &alpha, &bw); err != nil || !(bw > 0) || !(alpha >= 0) || math.IsInf(alpha+bw, 0) {
			return fmt.Errorf("--link %q: want AXIS=ALPHA_US:GBPS or gpus", part)
		}
		t.Links[a] = mesh.Link{Alpha: alpha * 1e-6, Beta: 1 / (bw * 1e9), Gamma: def.Gamma}
		set[a] = true
	}
	return nil
}

// parse parses flags that may come before or after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: meshrun %s\n", synopsis)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(e.stderr, "\nflags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseAndCompile parses a command's flags and its one FILE argument,
// checks the shared flags, compiles the file, then runs the command's own
// checks (validate, which may be nil) — all before any work. A nil plan
// comes with the exit code to return.
func (e *env) parseAndCompile(fs *flag.FlagSet, args []string, c *common, validate func(*lower.Plan, *checks)) (string, *lower.Plan, int) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", nil, flagExit(err)
	}
	k := newChecks(e, fs)
	c.validate(k)
	switch {
	case len(pos) == 0:
		k.fail("missing FILE, the program to %s", fs.Name())
	case len(pos) > 1:
		k.fail("want one FILE, got %d: %s", len(pos), strings.Join(pos, " "))
	}
	if !e.report(k) {
		return "", nil, ExitUsage
	}
	var dump bytes.Buffer
	p, code := e.compile(pos[0], c, &dump)
	if p == nil {
		return "", nil, code
	}
	if validate != nil {
		validate(p, k)
		if !e.report(k) {
			return "", nil, ExitUsage
		}
	}
	e.stdout.Write(dump.Bytes()) // --dump-after: shown once the command line is known to be good
	return pos[0], p, code
}

// compile checks and lowers a file, printing diagnostics on failure. The
// plan dumps of --dump-after go to dump, and to stdout when lowering fails
// (they are then what the user asked them for).
func (e *env) compile(path string, c *common, dump *bytes.Buffer) (*lower.Plan, int) {
	g, sources, err := lang.CheckFile(path, lang.CheckOptions{Devices: c.devices, Pipeline: c.schedule})
	if err != nil {
		e.diag(err, sources)
		return nil, ExitUsage
	}
	topo, err := c.topology(g, e.stderr)
	if err != nil {
		fmt.Fprintln(e.stderr, "meshrun:", err)
		return nil, ExitUsage
	}
	opts := lower.Options{Topo: topo, Verify: c.verify, DumpAfter: c.dumpAfter,
		Memory: c.memoryBudget(deviceCount(g), c.judgeMemoryOnlyIfSet), HostInBudget: c.hostInBudget()}
	c.bucket.apply(&opts)
	if c.dumpAfter != "" {
		opts.Dump = dump
	}
	p, err := lower.Lower(g, opts)
	if err != nil {
		e.stdout.Write(dump.Bytes())
		e.diag(err, g.Sources)
		return nil, ExitUsage
	}
	return p, ExitOK
}

func (e *env) diag(err error, sources map[string][]byte) {
	var pe *os.PathError
	if errors.As(err, &pe) {
		fmt.Fprintf(e.stderr, "meshrun: %v\n", err)
		return
	}
	fmt.Fprint(e.stderr, lang.Render(err, sources))
}

// reference lowers the same graph onto one device. A program with local
// functions is written per device, so its graph holds the blocks of this
// mesh: its reference is the program checked again on a mesh whose axes
// have size 1, where each block is the whole tensor.
func reference(p *lower.Plan) (*lower.Plan, error) {
	g := p.Graph
	if !g.HasLocal() {
		return lower.Lower(g, lower.Options{Mesh: p.Mesh.Single(), Memory: referenceBudget(p), HostInBudget: p.Opts.HostInBudget})
	}
	single, err := lang.CheckSource(g.File, g.Sources[g.File], lang.CheckOptions{Dir: filepath.Dir(g.File), SingleDevice: true})
	if err != nil {
		return nil, err
	}
	return lower.Lower(single, lower.Options{Mesh: single.Mesh.Single(), Memory: referenceBudget(p), HostInBudget: p.Opts.HostInBudget})
}

// execute runs a plan on its launcher. Under MPI only rank 0's process
// gets the outputs (the others get a result with no outputs).
func (e *env) execute(p *lower.Plan, c *common) (*rt.Result, int) {
	l, code := e.launch(p, c)
	if l == nil {
		return nil, code
	}
	res, err := rt.RunOn(context.Background(), l, nil, false)
	if err != nil {
		e.runError("meshrun: run failed on mesh %s: %v\n", p.Exec.Mesh, err)
		return nil, ExitFailure
	}
	return res, ExitOK
}

// executeHere runs a plan on in-process ranks (the single-device
// reference of check, which rank 0's process runs alone).
func (e *env) executeHere(p *lower.Plan, c *common) (*rt.Result, int) {
	res, err := rt.Run(context.Background(), p, rt.Options{Seed: c.seed, Timeout: c.timeout})
	if err != nil {
		fmt.Fprintf(e.stderr, "meshrun: run failed on mesh %s: %v\n", p.Exec.Mesh, err)
		return nil, ExitFailure
	}
	return res, ExitOK
}

func (e *env) run(args []string) int {
	var c common
	fs := newFlags(e, "run", "run FILE [--seed N] [--out DIR] [--trace FILE]")
	c.register(fs)
	c.registerBackend(fs)
	out := fs.String("out", "", "write every output as DIR/NAME.npy (the whole logical tensor)")
	trace := fs.String("trace", "", "write the per-device timeline as Chrome trace JSON")
	validate := func(p *lower.Plan, k *checks) {
		if p.Graph.Train != nil {
			k.fail("the program has a train block: use meshrun train (or meshrun check to compare it with one device)")
		}
		k.outDir("out", *out)
		k.outFile("trace", *trace)
	}
	_, p, code := e.parseAndCompile(fs, args, &c, validate)
	if p == nil {
		return code
	}
	c.deviceTime = *trace != ""
	res, code := e.execute(p, &c)
	if res == nil || e.follower {
		return code // a follower of an MPI run: rank 0 reports
	}
	for i, name := range res.Names {
		t := res.Outputs[i]
		fmt.Fprintf(e.stdout, "%s : %s%s %s = %s\n", name, t.DType, ir.ShapeString(t.Shape), p.Outputs[i].Placement, preview(t))
	}
	var peak int64
	for _, d := range res.Devices {
		peak = max(peak, d.Peak)
	}
	fmt.Fprintf(e.stdout, "ran on %d devices %s in %v; peak %s per device\n", p.Exec.Mesh.Size(), p.Exec.Mesh, res.Wall.Round(time.Microsecond), lower.HumanBytes(float64(peak)))
	if *out != "" {
		if err := writeOutputs(*out, res); err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return ExitFailure
		}
	}
	if *trace != "" {
		if err := writeTrace(*trace, p, res); err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return ExitFailure
		}
	}
	return ExitOK
}

func writeOutputs(dir string, res *rt.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, name := range res.Names {
		t := rt.NpyReady(res.Outputs[i])
		if err := npy.WriteFile(filepath.Join(dir, name+".npy"), t.Shape, t.Data); err != nil {
			return err
		}
	}
	return nil
}

func writeTrace(path string, p *lower.Plan, res *rt.Result) error {
	return atomicfile.Write(path, func(w io.Writer) error { return rt.WriteChromeTrace(w, p.Exec.Mesh, res) }, nil)
}

// preview prints the first few elements; integers as integers (an i64
// such as 4611686018427387904 is not rounded through float64).
func preview(t *rt.Tensor) string {
	const shown = 6
	var parts []string
	switch d := t.Data.(type) {
	case []int64:
		for _, v := range d[:min(len(d), shown)] {
			parts = append(parts, strconv.FormatInt(v, 10))
		}
	case []int32:
		for _, v := range d[:min(len(d), shown)] {
			parts = append(parts, strconv.FormatInt(int64(v), 10))
		}
	default:
		v := t.Float64s()
		for _, x := range v[:min(len(v), shown)] {
			parts = append(parts, fmt.Sprintf("%.6g", x))
		}
	}
	s := "[" + strings.Join(parts, " ")
	if n := t.Numel(); n > shown {
		s += fmt.Sprintf(" … (%d values)", n)
	}
	return s + "]"
}

func (e *env) check(args []string) int {
	var c common
	fs := newFlags(e, "check", "check FILE [--rtol R] [--atol A]")
	c.register(fs)
	c.registerBackend(fs)
	var rtolFlag, atolFlag tolerance
	fs.Var(&rtolFlag, "rtol", "relative tolerance `R` (default by dtype: "+toleranceHelp(0)+")")
	fs.Var(&atolFlag, "atol", "absolute tolerance `A` (default by dtype: "+toleranceHelp(1)+")")
	validate := func(_ *lower.Plan, k *checks) {
		rtolFlag.check(k, "rtol")
		atolFlag.check(k, "atol")
	}
	file, p, code := e.parseAndCompile(fs, args, &c, validate)
	if p == nil {
		return code
	}
	rtol, atol := rtolFlag.value(), atolFlag.value()
	ref, err := reference(p)
	if err != nil {
		fmt.Fprint(e.stderr, lang.Render(err, p.Graph.Sources))
		return ExitUsage
	}
	if p.Graph.Train != nil {
		return e.checkTraining(file, p, ref, &c, rtol, atol)
	}
	got, code := e.execute(p, &c)
	if got == nil || e.follower {
		return code // a follower of an MPI run: rank 0 compares
	}
	want, code := e.executeHere(ref, &c)
	if want == nil {
		return code
	}
	if testHookSharded != nil {
		testHookSharded(got)
	}
	ok := true
	fmt.Fprintf(e.stdout, "%s on %s (%d devices) vs 1 device:\n", file, p.Exec.Mesh, p.Exec.Mesh.Size())
	fmt.Fprintf(e.stdout, "  collectives inserted: %s\n", summary(lower.Explain(p)))
	for i, name := range want.Names {
		tol := c.checkTolerance(p.Graph, name, p.Exec.Mesh.Size()).Override(rtol, atol)
		d := rt.CompareWithin(got.Output(name), want.Outputs[i], tol)
		status := "ok"
		if !d.OK {
			status, ok = "MISMATCH", false
		}
		if d.Shapes != "" {
			fmt.Fprintf(e.stdout, "  %-12s %-8s %s\n", name, status, d.Shapes)
			continue
		}
		fmt.Fprintf(e.stdout, "  %-12s %-8s max abs err %.3g  rel err %s  (%s)\n", name, status, d.MaxAbs, d.RelErr(), tol)
	}
	if len(want.Names) == 0 {
		fmt.Fprintln(e.stdout, "  (the program has no outputs to compare)")
	}
	if !ok {
		fmt.Fprintln(e.stdout, "FAIL: the sharded run differs from the single-device run")
		return ExitFailure
	}
	fmt.Fprintln(e.stdout, "PASS: every output equals the single-device run")
	return ExitOK
}

// testHookSharded lets tests tamper with a sharded result to see check fail.
var testHookSharded func(*rt.Result)

// summary lists the inserted steps by kind: "1 all_reduce (96.0 KiB per device)".
func summary(r *lower.Report) string {
	sends := ""
	if r.Pipeline != nil {
		var b int64
		for _, t := range r.Pipeline.Transfers {
			b += t.Bytes
		}
		sends = fmt.Sprintf("%d sends between pipeline stages (%s per device, all stages together)", len(r.Pipeline.Transfers), lower.HumanBytes(float64(b)))
	}
	parts := kindCounts(r.Collectives, "")
	parts = append(parts, kindCounts(r.Written, " written in local functions")...)
	if sends != "" {
		parts = append(parts, sends)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ") + " — details: meshrun explain"
}

// kindCounts counts collectives by kind, in order of first appearance:
// "3 all_gather (1.5 KiB per device)".
func kindCounts(cs []lower.CollectiveReport, qualifier string) []string {
	var kinds []string
	counts := map[string]int{}
	bytes := map[string]float64{}
	for _, c := range cs {
		if counts[c.Kind] == 0 {
			kinds = append(kinds, c.Kind)
		}
		counts[c.Kind]++
		bytes[c.Kind] += c.Bytes
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s%s (%s per device)", counts[k], k, qualifier, lower.HumanBytes(bytes[k])))
	}
	return parts
}

// tolerance is check's --rtol or --atol: unset means the dtype's default.
type tolerance struct {
	v   float64
	set bool
}

// String is empty when unset, so that --help shows no "(default ...)" for
// a default that depends on the dtype.
func (t *tolerance) String() string {
	if t == nil || !t.set {
		return ""
	}
	return strconv.FormatFloat(t.v, 'g', -1, 64)
}

func (t *tolerance) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number")
	}
	t.v, t.set = v, true
	return nil
}

func (t *tolerance) check(k *checks, name string) {
	if t.set {
		k.number(name, t.v, 0, false)
	}
}

// value is the tolerance, or -1 for the dtype's default (see tolerances).
func (t *tolerance) value() float64 {
	if !t.set {
		return -1
	}
	return t.v
}

// toleranceHelp lists the default relative (which 0) or absolute (1)
// tolerance of every dtype, from rt's table itself (half precision: from
// its unit roundoff u and the mesh's device count n).
func toleranceHelp(which int) string {
	var parts []string
	for _, dt := range []ir.DType{ir.F64, ir.F32, ir.F16, ir.BF16} {
		t := rt.DefaultTolerance(dt, 1)
		switch {
		case which == 0:
			parts = append(parts, fmt.Sprintf("%s %g", dt, t.Rtol))
		case t.Norm > 0:
			parts = append(parts, fmt.Sprintf("%s devices·%g·max|want|", dt, t.Norm))
		default:
			parts = append(parts, fmt.Sprintf("%s %g", dt, t.Atol))
		}
	}
	return strings.Join(parts, ", ") + ", integers exact"
}

func tolerances(dtype string, rtol, atol float64) (float64, float64) {
	r, a := 1e-4, 1e-5
	if dtype == "f64" {
		r, a = 1e-9, 1e-12
	}
	switch dtype {
	case "i32", "i64":
		r, a = 0, 0
	case "bf16":
		r, a = 2e-2, 1e-2
	case "f16":
		r, a = 5e-3, 1e-3
	}
	if rtol >= 0 {
		r = rtol
	}
	if atol >= 0 {
		a = atol
	}
	return r, a
}

func (e *env) explain(args []string) int {
	defer compilePacing()()
	var c common
	fs := newFlags(e, "explain", "explain FILE [--json] [--blocks]")
	c.register(fs)
	asJSON := fs.Bool("json", false, "print the report as one JSON document (schema in spec.md)")
	blocks := fs.Bool("blocks", false, "step through the local functions: which block each device holds, which blocks move")
	c.judgeMemoryOnlyIfSet = true
	validate := func(_ *lower.Plan, k *checks) {
		if *asJSON && c.dumpAfter != "" {
			k.fail("--dump-after with --json: the dump would make stdout invalid JSON; use one of them")
		}
		if k.set["launcher"] {
			k.fail("--launcher %s: explain compiles the program but does not run it", c.launcher)
		}
	}
	_, p, code := e.parseAndCompile(fs, args, &c, validate)
	if p == nil {
		return code
	}
	if *blocks {
		return e.explainBlocks(p, *asJSON)
	}
	r := lower.Explain(p)
	if *asJSON {
		return e.writeJSON(r)
	}
	r.WriteText(e.stdout) // written as rendered: tens of megabytes for a deep pipelined model
	return ExitOK
}

func (e *env) grammar(args []string) int {
	fs := newFlags(e, "grammar", "grammar\n\nprints the grammar of the .mesh language (EBNF, generated from the parser)")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "meshrun grammar: takes no arguments, got %s\n", strings.Join(pos, " "))
		return ExitUsage
	}
	fmt.Fprintln(e.stdout, lang.Grammar())
	return ExitOK
}

func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	return ExitUsage
}

// writeJSON prints a report as indented JSON, its nil lists written as []
// (a report's fields are never null).
func (e *env) writeJSON(r any) int {
	emptyNotNull(reflect.ValueOf(r))
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		fmt.Fprintln(e.stderr, "meshrun:", err)
		return ExitFailure
	}
	return ExitOK
}
