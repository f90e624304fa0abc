package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/meshrun/meshrun/internal/atomicfile"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/pipeline"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
)

// trace runs one execution (one training step) on the in-process launcher
// and shows its timeline: a Chrome trace file, and for a pipeline the
// schedule as a Gantt chart with its bubble and activation memory. With
// --backend cuda the timeline is the GPU's: each instruction spans the
// CUDA events recorded around its work (rt.Options.DeviceTime).
func (e *env) trace(args []string) int {
	var c common
	fs := newFlags(e, "trace", "trace FILE [-o trace.json] [--json] [--svg FILE] [--clock unit|model|wall] [--schedules LIST] [--backend cpu|cuda|auto]")
	c.register(fs)
	c.registerBackend(fs)
	out := fs.String("o", "", "write the timeline as Chrome trace JSON (Perfetto, chrome://tracing)")
	asJSON := fs.Bool("json", false, "print the pipeline's events (rank, stage, micro, kind, start, end) as JSON instead of the chart")
	svg := fs.String("svg", "", "write the pipeline's Gantt chart as an SVG picture")
	clock := fs.String("clock", "unit", "unit: a rank's forward of the whole batch takes 1 unit, its backward 2 (input and weight gradient 1 each), shared by its micro-batches and stages (the textbook picture); model: actions take their modelled time (FLOPs at the cost model's rate, links as modelled); wall: measured")
	width := fs.Int("width", 0, "chart width in columns (0: fit the schedule)")
	compare := fs.String("schedules", "", "compare schedules on this program, e.g. 'naive,gpipe,1f1b,interleaved(2),zb1p,zbv': each one's measured bubble, step and kept activations beside its formula")
	validate := func(_ *lower.Plan, k *checks) {
		if *clock != "model" && *clock != "unit" && *clock != "wall" {
			k.fail("--clock %q: want model, unit or wall", *clock)
		}
		if *width < 0 {
			k.fail("--width %d: want a number of columns, or 0 to fit the schedule", *width)
		}
		k.outFile("o", *out)
		k.outFile("svg", *svg)
		if *compare == "" {
			return
		}
		for _, spec := range strings.Split(*compare, ",") {
			if _, _, err := pipeline.ParseSpec(spec); err != nil {
				k.fail("--schedules: %v", err)
			}
		}
		if *out != "" || *svg != "" || *asJSON {
			k.fail("--schedules prints a comparison table: -o, --svg and --json apply to one schedule's trace")
		}
	}
	file, p, code := e.parseAndCompile(fs, args, &c, validate)
	if p == nil {
		return code
	}
	var err error
	if c.opened, err = c.openBackend(e.stderr); err != nil {
		fmt.Fprintf(e.stderr, "meshrun: --backend %s: %v\n", c.backend, err)
		return ExitUsage
	}
	if *compare != "" {
		return e.compareSchedules(file, &c, *clock, strings.Split(*compare, ","))
	}
	res, err := e.traceRun(p, &c, *clock)
	if err != nil {
		fmt.Fprintf(e.stderr, "meshrun: run failed on mesh %s: %v\n", p.Exec.Mesh, err)
		return ExitFailure
	}
	if *out != "" {
		if err := writeTrace(*out, p, res); err != nil {
			fmt.Fprintf(e.stderr, "meshrun: %v\n", err)
			return ExitFailure
		}
	}
	if p.Pipe == nil {
		fmt.Fprintf(e.stdout, "%s on %s: no pipeline axis, so no schedule to draw", file, p.Exec.Mesh)
		if *out != "" {
			fmt.Fprintf(e.stdout, "; the timeline of every device is in %s", *out)
			if onDevice(res) {
				fmt.Fprint(e.stdout, " (GPU time: each instruction spans the CUDA events around its work)")
			}
		}
		fmt.Fprintln(e.stdout)
		return ExitOK
	}
	events := rt.PipelineEvents(p.Exec, res.Devices)
	if *svg != "" {
		write := func(w io.Writer) error { _, err := w.Write(pipeline.SVG(events, p.Pipe.Schedule.Ranks)); return err }
		if err := atomicfile.Write(*svg, write, nil); err != nil {
			fmt.Fprintf(e.stderr, "meshrun: %v\n", err)
			return ExitFailure
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(events); err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return ExitFailure
		}
		return ExitOK
	}
	e.printSchedule(file, p, res, events, *clock, *width)
	if onDevice(res) {
		fmt.Fprintln(e.stdout, "\nthe timeline is GPU time: each instruction spans the CUDA events around its work")
	}
	return ExitOK
}

// traceRun executes p once (a training program: its last step) on the
// in-process launcher with the chosen clock. On a GPU it runs twice (the
// last two steps) and shows the second: the first pays the GPU's set-up
// (cuBLAS's first calls, the allocator's first cuMemAlloc's), which is
// not the program's time.
func (e *env) traceRun(p *lower.Plan, c *common, clock string) (*rt.Result, error) {
	warm := 0
	if c.opened != nil {
		warm = 1
	}
	opts := rt.Options{Seed: c.seed, Timeout: c.timeout, Backend: c.opened, DeviceTime: true}
	var err error
	if opts.Backends, err = c.localBackends(c.opened, p.Exec.Mesh.Size(), io.Discard); err != nil {
		return nil, err
	}
	if p.Pipe != nil && clock != "wall" {
		opts.Clock = simClock(p, c, clock)
	}
	ctx := context.Background()
	l, err := rt.NewLocal(ctx, p.Exec, opts)
	if err != nil {
		return nil, err
	}
	if t := p.Graph.Train; t != nil {
		r, err := rt.TrainOn(ctx, l, p, opts, rt.TrainConfig{Start: max(t.Steps-1-warm, 0)})
		if err != nil {
			return nil, err
		}
		return r.Last, nil
	}
	for range warm {
		if _, err := l.Run(ctx, nil); err != nil {
			return nil, err
		}
	}
	return l.Run(ctx, nil)
}

// simClock times pipeline actions: by the cost model (each action's
// kernels' FLOPs at lower.ModelFLOPS, shared by the devices of a stage;
// messages over the link model), or one unit per F, I and W.
func simClock(p *lower.Plan, c *common, mode string) *rt.SimClock {
	if mode == "unit" {
		// a rank's forward of the whole batch takes one unit, its
		// backward two: an action of one of M micro-batches on one of the
		// rank's v stages takes 1/(vM) of that, so schedules with
		// different v and M (naive: M = 1) compare (a unit is a second on
		// the chart)
		s := p.Pipe.Schedule
		share := time.Duration(s.Stages / s.Ranks * s.Micro)
		return &rt.SimClock{Action: func(a pipeline.Action) time.Duration {
			if a.Kind == pipeline.B {
				return 2 * time.Second / share
			}
			return time.Second / share
		}}
	}
	perStage := p.Exec.Mesh.Size() / p.Pipe.Schedule.Ranks
	cost := map[pipeline.Action]float64{}
	for _, prog := range p.Exec.Programs {
		for _, in := range prog.Instrs {
			if in.Kind == plan.Compute && in.Act != nil {
				cost[*in.Act] += ops.KernelFLOPs(in.Kernel.Op, in.Kernel.Shape, in.Kernel.AsOperands(in.Kernel.ArgShapes)) / lower.ModelFLOPS / float64(perStage)
			}
		}
	}
	alpha, beta := c.alphaUs*1e-6, 1/(c.bandwidth*1e9)
	return &rt.SimClock{
		Action: func(a pipeline.Action) time.Duration { return seconds(cost[a]) },
		Link:   func(b int64) time.Duration { return seconds(alpha + float64(b)*beta) },
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * 1e9) }

// onDevice says whether the run's timeline is the device's (a GPU's
// events), not the host's.
func onDevice(res *rt.Result) bool {
	for _, d := range res.Devices {
		if len(d.Events) > 0 && d.Events[0].OnDevice {
			return true
		}
	}
	return false
}

// printSchedule draws the pipeline's timeline and its measured figures
// next to the textbook ones.
func (e *env) printSchedule(file string, p *lower.Plan, res *rt.Result, events []pipeline.Event, clock string, width int) {
	s := p.Pipe.Schedule
	fmt.Fprintf(e.stdout, "%s on %s: schedule %s, %d pipeline ranks, %d stages, %d micro-batches (clock: %s)\n\n",
		file, p.Exec.Mesh, s.Name, s.Ranks, s.Stages, s.Micro, clock)
	busy := 0.0
	for _, b := range pipeline.Busy(events, s.Ranks) {
		busy += b
	}
	if busy == 0 {
		fmt.Fprintf(e.stdout, "the actions take no time on the %s clock at this size (under a nanosecond of modelled compute each): try --clock unit\n", clock)
		return
	}
	fmt.Fprint(e.stdout, pipeline.Gantt(events, s.Ranks, width))
	v := s.Stages / s.Ranks
	if f, text, ok := pipeline.Formula(s.Name, s.Ranks, s.Micro, v); ok {
		fmt.Fprintf(e.stdout, "textbook bubble with uniform stages: %s = %.1f%%\n", text, 100*f)
	}
	if clock == "unit" {
		fmt.Fprintf(e.stdout, "step %s units, optimizer included (a unit: one rank's forward of the whole batch; its backward takes two)\n", stepTime(res, clock))
	} else {
		fmt.Fprintf(e.stdout, "step %s on the %s clock, optimizer included\n", stepTime(res, clock), clock)
	}
	fmt.Fprintln(e.stdout, "\nactivations kept per stage (from the runtime's memory accounting):")
	type row struct {
		stage, live int
		kept        int64
	}
	var rows []row
	for _, d := range res.Devices {
		if d.Pipe == nil || !p.Exec.LeadsStage(d.Device) {
			continue
		}
		for st, n := range d.Pipe.PeakLive {
			rows = append(rows, row{st, n, d.Pipe.PeakKept[st]})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].stage < rows[j].stage })
	for _, r := range rows {
		fmt.Fprintf(e.stdout, "  stage %d: at most %d micro-batch(es), %s per device\n", r.stage, r.live, lower.HumanBytes(float64(r.kept)))
	}
}

// compareSchedules traces the program once per schedule and tabulates
// what each measured beside its textbook bubble.
func (e *env) compareSchedules(file string, c *common, clock string, specs []string) int {
	var rows [][]string
	for _, spec := range specs {
		c.schedule = strings.TrimSpace(spec)
		var dump bytes.Buffer
		p, code := e.compile(file, c, &dump)
		if p == nil {
			// the position is the file's pipeline setting, which spec replaced
			fmt.Fprintf(e.stderr, "meshrun: with pipeline = %s from --schedules in place of the file's setting\n", c.schedule)
			return code
		}
		e.stdout.Write(dump.Bytes())
		if p.Pipe == nil {
			fmt.Fprintf(e.stderr, "meshrun: %s has no pipeline axis: nothing to compare\n", file)
			return ExitUsage
		}
		res, err := e.traceRun(p, c, clock)
		if err != nil {
			fmt.Fprintf(e.stderr, "meshrun: %s: run failed: %v\n", spec, err)
			return ExitFailure
		}
		rows = append(rows, scheduleRow(p, res, clock))
	}
	fmt.Fprintf(e.stdout, "%s: one training step under each schedule (clock: %s; bubble = idle rank-time / (ranks × step))\n\n", file, clock)
	t := [][]string{{"schedule", "stages", "bubble", "textbook", "step", "micro-batches kept per stage", "activation bytes kept per stage"}}
	t = append(t, rows...)
	widths := make([]int, len(t[0]))
	for _, r := range t {
		for i, cell := range r {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	for _, r := range t {
		for i, cell := range r {
			fmt.Fprintf(e.stdout, "%s%s  ", cell, strings.Repeat(" ", widths[i]-len([]rune(cell))))
		}
		fmt.Fprintln(e.stdout)
	}
	return ExitOK
}

// scheduleRow is one schedule's line of the comparison.
func scheduleRow(p *lower.Plan, res *rt.Result, clock string) []string {
	s := p.Pipe.Schedule
	events := rt.PipelineEvents(p.Exec, res.Devices)
	name := s.Name
	if v := s.Stages / s.Ranks; s.Name == "interleaved" {
		name = fmt.Sprintf("interleaved(%d)", v)
	}
	formula := "—"
	if f, text, ok := pipeline.Formula(s.Name, s.Ranks, s.Micro, s.Stages/s.Ranks); ok {
		formula = fmt.Sprintf("%s = %.1f%%", text, 100*f)
	}
	step := stepTime(res, clock)
	if clock == "unit" {
		step += " units"
	}
	live := make([]string, s.Stages)
	kept := make([]string, s.Stages)
	for _, d := range res.Devices {
		if d.Pipe == nil || !p.Exec.LeadsStage(d.Device) {
			continue
		}
		for st, n := range d.Pipe.PeakLive {
			live[st] = fmt.Sprint(n)
			kept[st] = lower.HumanBytes(float64(d.Pipe.PeakKept[st]))
		}
	}
	return []string{name, fmt.Sprint(s.Stages), fmt.Sprintf("%.1f%%", 100*pipeline.Bubble(events, s.Ranks)), formula, step,
		strings.Join(live, " "), strings.Join(kept, " ")}
}

// stepTime is when the last rank finished the step, optimizer included:
// in units on the unit clock (a unit is a second there), else a duration.
func stepTime(res *rt.Result, clock string) string {
	end := time.Duration(0)
	for _, d := range res.Devices {
		if d.Pipe != nil {
			end = max(end, d.Pipe.End)
		}
	}
	if clock == "unit" {
		return fmt.Sprintf("%g", end.Seconds())
	}
	return end.Round(time.Nanosecond).String()
}
