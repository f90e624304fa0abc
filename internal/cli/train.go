package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/meshrun/meshrun/internal/atomicfile"
	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
	"golang.org/x/term"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func (e *env) train(args []string) int {
	var c common
	fs := newFlags(e, "train", "train FILE [--out DIR] [--log FILE] [--plot PNG] [--save DIR [--save-every N]] [--resume DIR] [--stop-at STEP]")
	c.register(fs)
	c.registerBackend(fs)
	out := fs.String("out", "", "write every param after training as DIR/NAME.npy")
	logPath := fs.String("log", "", "write one JSON line per step: step, loss, lr, seconds")
	plotPath := fs.String("plot", "", "draw the loss curve into this PNG file")
	saveDir := fs.String("save", "", "write params and optimizer state to DIR/checkpoint.safetensors (after the last step)")
	saveEvery := fs.Int("save-every", 0, "with --save, also save every N steps")
	resumeDir := fs.String("resume", "", "continue from DIR/checkpoint.safetensors (saved on any mesh)")
	stopAt := fs.Int("stop-at", 0, "stop after this step (the schedule still spans all steps); with --save, saves there")
	cfg := rt.TrainConfig{}
	validate := func(p *lower.Plan, k *checks) {
		tr := p.Graph.Train
		if tr == nil {
			k.fail("the program has no train block (use meshrun run)")
			return
		}
		k.outDir("out", *out)
		k.outFile("log", *logPath)
		k.outFile("plot", *plotPath)
		k.outDir("save", *saveDir)
		if *saveEvery < 0 || *saveEvery > 0 && *saveDir == "" {
			k.fail("--save-every %d: want a number of steps > 0, with --save DIR", *saveEvery)
		}
		if k.set["stop-at"] && (*stopAt < 1 || *stopAt > tr.Steps) {
			k.fail("--stop-at %d: want a step from 1 to %d (the program's steps)", *stopAt, tr.Steps)
		}
		if !k.empty("resume", *resumeDir) && *resumeDir != "" {
			if err := resume(*resumeDir, tr, &cfg); err != nil {
				k.fail("--resume %s: %v", *resumeDir, err)
			} else if k.set["stop-at"] && *stopAt <= cfg.Start {
				k.fail("--stop-at %d: the checkpoint is already at step %d; want a later step", *stopAt, cfg.Start)
			}
		}
	}
	_, p, code := e.parseAndCompile(fs, args, &c, validate)
	if p == nil {
		return code
	}
	l, code := e.launch(p, &c)
	if l == nil {
		return code
	}
	if _, ok := l.(*rt.Local); ok {
		// every rank in this process: collect by the plan's total, not
		// twice the live heap (rt.LimitMemory)
		var total int64
		for _, b := range p.Peak {
			total += b
		}
		defer rt.LimitMemory(total)()
	}
	var logw io.Writer
	if *logPath != "" && l.Lead() {
		f, err := os.Create(*logPath)
		if err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return ExitFailure
		}
		defer f.Close()
		logw = f
	}
	saves := 0
	save := func(s rt.StepInfo) (err error) {
		snap, err := s.Snapshot() // every rank takes part; rank 0's process writes
		if err != nil {
			return err
		}
		defer func() {
			if err == nil {
				err = e.waitForLead()
			}
		}()
		if snap == nil {
			return nil
		}
		saves++
		meta := map[string]string{
			"format": "meshrun-checkpoint-1", "step": strconv.Itoa(s.Step), "optimizer": p.Graph.Train.Optimizer.Kind,
			"applied": strconv.Itoa(s.Applied),
		}
		if s.Scaler != nil {
			meta["loss_scale"] = strconv.FormatFloat(s.Scaler.Scale, 'g', -1, 64)
			meta["growth_tracker"] = strconv.Itoa(s.Scaler.Tracker)
		}
		err = rt.SaveCheckpoint(*saveDir, snap, meta, testStall(saves))
		return err
	}
	bar := newProgress(e.stderr, samplesPerStep(p.Graph))
	cfg.OnStep = func(s rt.StepInfo) error {
		bar.step(s)
		last := s.Step == s.Steps || s.Step == *stopAt
		if *saveDir != "" && (last || (*saveEvery > 0 && s.Step%*saveEvery == 0)) {
			if err := save(s); err != nil {
				return fmt.Errorf("saving a checkpoint after step %d: %w", s.Step, err)
			}
		}
		if logw != nil {
			rec := map[string]any{"step": s.Step, "loss": s.Loss, "lr": s.LR, "seconds": s.Wall.Seconds()}
			if s.Scaler != nil {
				rec["loss_scale"], rec["skipped"] = s.Scale, s.Skipped
			}
			line, _ := json.Marshal(rec)
			if _, err := fmt.Fprintf(logw, "%s\n", line); err != nil {
				return err
			}
		}
		if s.Skipped {
			fmt.Fprintf(e.stderr, "step %d: gradients overflowed at loss scale %g; step skipped\n", s.Step, s.Scale)
		}
		if s.Step == *stopAt {
			return errStop
		}
		return nil
	}
	res, err := rt.TrainOn(context.Background(), l, p, rt.Options{Seed: c.seed, Timeout: c.timeout}, cfg)
	bar.done()
	if errors.Is(err, errStop) {
		fmt.Fprintf(e.stdout, "stopped after step %d of %d\n", *stopAt, p.Graph.Train.Steps)
		return ExitOK
	}
	if err != nil {
		e.runError("meshrun: training failed on mesh %s: %v\n", p.Exec.Mesh, err)
		return ExitFailure
	}
	if !l.Lead() {
		return ExitOK
	}
	first, last := res.Losses[0], res.Losses[len(res.Losses)-1]
	fmt.Fprintf(e.stdout, "trained steps %d to %d on %d devices %s: loss %.6g -> %.6g\n", cfg.Start+1, cfg.Start+len(res.Losses), p.Exec.Mesh.Size(), p.Exec.Mesh, first, last)
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return ExitFailure
		}
		for i, prm := range res.Params {
			t := rt.NpyReady(res.Final[i])
			if err := npy.WriteFile(filepath.Join(*out, prm.Name+".npy"), t.Shape, t.Data); err != nil {
				fmt.Fprintln(e.stderr, "meshrun:", err)
				return ExitFailure
			}
		}
	}
	if *plotPath != "" {
		if err := plotLoss(*plotPath, res.Losses); err != nil {
			fmt.Fprintln(e.stderr, "meshrun: --plot:", err)
			return ExitFailure
		}
	}
	return ExitOK
}

var errStop = errors.New("stop requested")

// resume reads the checkpoint in dir into cfg: the step to continue after,
// the tensors, and the optimizer's and loss scaler's counters.
func resume(dir string, tr *ir.Train, cfg *rt.TrainConfig) error {
	tensors, meta, err := rt.LoadCheckpoint(dir)
	if err != nil {
		return err
	}
	step, err := strconv.Atoi(meta["step"])
	if err != nil || step < 0 {
		return fmt.Errorf("the checkpoint has no valid step (%q)", meta["step"])
	}
	if step >= tr.Steps {
		return fmt.Errorf("the checkpoint is at step %d and the program trains %d steps: nothing is left to train", step, tr.Steps)
	}
	if meta["optimizer"] != tr.Optimizer.Kind {
		return fmt.Errorf("the checkpoint was trained with %s, the program uses %s", meta["optimizer"], tr.Optimizer.Kind)
	}
	cfg.Start, cfg.Initial = step, tensors
	if a, err := strconv.Atoi(meta["applied"]); err == nil {
		cfg.Applied = a
	}
	if sc, err := strconv.ParseFloat(meta["loss_scale"], 64); err == nil {
		g := rt.NewGradScaler()
		g.Scale = sc
		g.Tracker, _ = strconv.Atoi(meta["growth_tracker"])
		cfg.Scaler = g
	}
	return nil
}

// testStall lets the crash test stop a save between writing the temporary
// file and renaming it: MESHRUN_TEST_SAVE_STALL=N stalls every save after
// the N-th for a minute.
func testStall(saves int) func() {
	n, err := strconv.Atoi(os.Getenv("MESHRUN_TEST_SAVE_STALL"))
	if err != nil || saves <= n {
		return nil
	}
	return func() { time.Sleep(time.Minute) }
}

// samplesPerStep is the rows each step sees: the train block's batch, or
// else the leading dim of the first input.
func samplesPerStep(g *ir.Graph) int {
	if g.Train != nil && g.Train.Batch > 0 {
		return g.Train.Batch
	}
	for _, v := range g.Values {
		if v.Op == "input" && v.Type.Rank() > 0 {
			return v.Type.Shape[0]
		}
	}
	return 0
}

// progress draws a one-line bar on a terminal; elsewhere it stays quiet.
// The line is redrawn in place with \r, so it must never be wider than the
// terminal: a wrapped line would leave one stale line per update.
type progress struct {
	w       io.Writer
	tty     bool
	cols    func() int // the terminal's width, asked at every update (it may change)
	samples int
	start   time.Time
}

func newProgress(w io.Writer, samples int) *progress {
	p := &progress{w: w, samples: samples, start: time.Now(), cols: func() int { return columns(-1) }}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
		p.cols = func() int { return columns(int(f.Fd())) }
	}
	return p
}

// columns is the width of the terminal fd, else $COLUMNS, else 80.
func columns(fd int) int {
	if fd >= 0 {
		if w, _, err := term.GetSize(fd); err == nil && w > 0 {
			return w
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 80
}

func (p *progress) step(s rt.StepInfo) {
	if !p.tty {
		return
	}
	el := time.Since(p.start)
	rate := float64(s.Step*p.samples) / el.Seconds()
	eta := time.Duration(float64(el) / float64(s.Step) * float64(s.Steps-s.Step))
	text := fmt.Sprintf(" step %d/%d  loss %.5g  %.0f samples/s  ETA %v ", s.Step, s.Steps, s.Loss, rate, eta.Round(time.Second))
	fmt.Fprint(p.w, "\r"+progressLine(text, s.Step, s.Steps, p.cols())+"\x1b[K") // K: clear what a longer line left
}

// progressLine fits the bar and text into cols-1 characters (writing the
// last column makes some terminals wrap): the bar takes what the text
// leaves, up to 30 cells, and is dropped, then the text cut, when narrow.
func progressLine(text string, step, steps, cols int) string {
	room := cols - 1
	width := min(30, room-utf8.RuneCountInString(text)-2)
	if width < 5 {
		r := []rune(strings.TrimLeft(text, " "))
		return string(r[:max(0, min(len(r), room))])
	}
	filled := width * step / steps
	return "[" + strings.Repeat("=", filled) + strings.Repeat(" ", width-filled) + "]" + text
}

func (p *progress) done() {
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func plotLoss(path string, losses []float64) error {
	pl := plot.New()
	pl.Title.Text = "training loss"
	pl.X.Label.Text = "step"
	pl.Y.Label.Text = "loss"
	pts := make(plotter.XYs, len(losses))
	for i, l := range losses {
		pts[i].X, pts[i].Y = float64(i+1), l
	}
	line, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	pl.Add(line, plotter.NewGrid())
	img, err := pl.WriterTo(6*vg.Inch, 4*vg.Inch, "png")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, func(w io.Writer) error { _, err := img.WriteTo(w); return err }, nil)
}

// checkTraining trains on the mesh and on one device and compares the loss
// of every step and every final parameter.
func (e *env) checkTraining(file string, p, ref *lower.Plan, c *common, rtol, atol float64) int {
	opts := rt.Options{Seed: c.seed, Timeout: c.timeout}
	l, code := e.launch(p, c)
	if l == nil {
		return code
	}
	got, err := rt.TrainOn(context.Background(), l, p, opts, rt.TrainConfig{})
	if err != nil {
		e.runError("meshrun: training failed on mesh %s: %v\n", p.Exec.Mesh, err)
		return ExitFailure
	}
	if !l.Lead() {
		return ExitOK // rank 0's process compares
	}
	want, err := rt.Train(context.Background(), ref, opts, rt.TrainConfig{})
	if err != nil {
		fmt.Fprintf(e.stderr, "meshrun: training failed on one device: %v\n", err)
		return ExitFailure
	}
	fmt.Fprintf(e.stdout, "%s: %d training steps on %s (%d devices) vs 1 device:\n", file, len(want.Losses), p.Exec.Mesh, p.Exec.Mesh.Size())
	fmt.Fprintf(e.stdout, "  collectives per step: %s\n", summary(lower.Explain(p)))
	if p.Graph.Train.Offload != "" && got.Last != nil && len(got.Last.Devices) > 0 {
		d := got.Last.Devices[0] // measured by the runtime in the last step
		hb := func(b int64) string { return lower.HumanBytes(float64(b)) }
		fmt.Fprintf(e.stdout, "  offload = %s, device 0 per step: %s to host, %s to device; peak %s device, %s host\n",
			p.Graph.Train.Offload, hb(d.ToHost), hb(d.ToDevice), hb(d.Peak), hb(d.HostPeak))
	}
	dt := p.Graph.Train.Loss.Type.DType.String()
	if prec := p.Graph.Train.Precision; prec != "" {
		dt = prec // half-precision compute: compare at its resolution
	} else if c.tf32 && dt == "f32" {
		dt = "f16" // TF32 matmuls: f16's mantissa
	}
	r, a := tolerances(dt, rtol, atol)
	ok := true
	report := func(name string, d rt.Diff) {
		status := "ok"
		if !d.OK {
			status, ok = "MISMATCH", false
		}
		if d.Shapes != "" {
			fmt.Fprintf(e.stdout, "  %-16s %-8s %s\n", name, status, d.Shapes)
			return
		}
		fmt.Fprintf(e.stdout, "  %-16s %-8s max abs err %.3g  rel err %s\n", name, status, d.MaxAbs, d.RelErr())
	}
	report("loss curve", rt.CompareTensors(rt.FromSlice([]int{len(got.Losses)}, got.Losses), rt.FromSlice([]int{len(want.Losses)}, want.Losses), r, a))
	for i, prm := range want.Params {
		report(prm.Name, rt.CompareTensors(got.Param(prm.Name), want.Final[i], r, a))
	}
	fmt.Fprintf(e.stdout, "  loss %.6g -> %.6g  (rtol %g, atol %g)\n", want.Losses[0], want.Losses[len(want.Losses)-1], r, a)
	if !ok {
		fmt.Fprintln(e.stdout, "FAIL: training on the mesh differs from training on one device")
		return ExitFailure
	}
	fmt.Fprintln(e.stdout, "PASS: the loss curve and every final parameter equal the single-device run")
	return ExitOK
}

func (e *env) estimate(args []string) int {
	fs := newFlags(e, "estimate", "estimate --params N --devices D [--dtype bf16|f16|f32] [--link GB/s] [--gpu-memory GB] [--k K]")
	psi := fs.Float64("params", 0, "model parameters (e.g. 7.5e9)")
	nd := fs.Int("devices", 0, "data-parallel devices")
	dtype := fs.String("dtype", "bf16", "precision of the forward, the gradients and the collectives: bf16 or f16 (mixed precision, f32 master weights) or f32")
	link := fs.Float64("link", 0, "link bandwidth in GB/s (1e9 bytes) per device, to turn bytes sent into seconds")
	gpuMem := fs.Float64("gpu-memory", 0, "memory per device in GB (1e9 bytes): print the fewest devices each stage fits on")
	k := fs.Float64("k", 0, "optimizer-state bytes per parameter as the ZeRO paper counts them (default 12 with bf16/f16: f32 master weights, momentum, variance; 8 with f32)")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	ck := newChecks(e, fs)
	cfg := validateEstimate(ck, pos, *psi, *nd, *dtype, *link, *gpuMem, *k)
	if !e.report(ck) {
		return ExitUsage
	}
	printEstimate(e.stdout, cfg, *dtype, *link, *gpuMem)
	printOffloadEstimate(e.stdout, cfg, *dtype, *link, *gpuMem)
	return ExitOK
}

// validateEstimate checks estimate's flags and returns the accounting's
// configuration.
func validateEstimate(ck *checks, pos []string, psi float64, nd int, dtype string, link, gpuMem, k float64) lower.EstimateConfig {
	if len(pos) > 0 {
		ck.fail("takes no FILE, got %s", strings.Join(pos, " "))
	}
	if !ck.set["params"] {
		ck.fail("missing --params N, the model's parameter count (e.g. 7.5e9)")
	} else {
		ck.number("params", psi, 0, true)
		// Bytes must stay finite; no model is near this size.
		if psi > 1e18 {
			ck.fail("--params %g: want at most 1e18", psi)
		}
	}
	if !ck.set["devices"] {
		ck.fail("missing --devices D, the data-parallel devices")
	} else if nd < 1 {
		ck.fail("--devices %d: want at least 1", nd)
	}
	cfg := lower.EstimateConfig{Psi: psi, Devices: nd, ElemBytes: 2, K: 12}
	switch dtype {
	case "bf16", "f16":
	case "f32":
		cfg.ElemBytes, cfg.K = 4, 8
	default:
		ck.fail("--dtype %q: want bf16, f16 or f32", dtype)
	}
	if ck.set["link"] {
		ck.number("link", link, 0, true)
	}
	if ck.set["gpu-memory"] {
		ck.number("gpu-memory", gpuMem, 0, true)
	}
	if ck.set["k"] {
		cfg.K = k
		// Under mixed precision K includes the 4-byte f32 master weights.
		if cfg.Mixed() && k < 4 {
			ck.fail("-k %g: want at least 4 with %s: K counts the 4-byte f32 master weights", k, dtype)
		} else {
			ck.number("k", k, 0, false)
		}
	}
	return cfg
}

// printEstimate writes the table: memory per device in explain's
// categories, bytes sent per step, and, when given a link and a memory
// size, seconds and the fewest devices that fit.
func printEstimate(w io.Writer, cfg lower.EstimateConfig, dtype string, link, gpuMem float64) {
	fmt.Fprintf(w, "memory per device and communication per step for Ψ = %.4g parameters on %d data-parallel devices, Adam, %s\n", cfg.Psi, cfg.Devices, dtype)
	if cfg.Mixed() {
		fmt.Fprintf(w, "(the ZeRO paper's accounting, K = %g, in explain's words: parameters are the f32 master weights, which the paper counts\n", cfg.K)
		fmt.Fprintf(w, " in K; the %s copy the forward reads is the paper's 2Ψ parameters, which explain counts under \"activations and other\")\n\n", dtype)
	} else {
		fmt.Fprintf(w, "(the ZeRO paper's accounting with f32 everywhere, K = %g: no half-precision copy)\n\n", cfg.K)
	}
	gb := func(b float64) string { return fmt.Sprintf("%.2f GB", b/1e9) }
	cols := []string{"stage", "parameters", "gradients", "optimizer states", "total", "sent per device"}
	if cfg.Mixed() {
		cols = slices.Insert(cols, 2, dtype+" copy")
	}
	if link > 0 {
		cols = append(cols, fmt.Sprintf("at %g GB/s", link))
	}
	if gpuMem > 0 {
		cols = append(cols, fmt.Sprintf("fewest %g GB devices", gpuMem))
	}
	rows := [][]string{cols}
	for _, r := range lower.EstimateZeRO(cfg) {
		row := []string{r.Name, gb(r.Params), gb(r.Grads), gb(r.Optimizer), gb(r.Total), gb(r.Sent)}
		if cfg.Mixed() {
			row = slices.Insert(row, 2, gb(r.Half))
		}
		if link > 0 {
			row = append(row, fmt.Sprintf("%.3g s", r.Sent/(link*1e9)))
		}
		if gpuMem > 0 {
			row = append(row, fewestText(lower.FewestDevices(cfg, r.Stage, gpuMem*1e9)))
		}
		rows = append(rows, row)
	}
	fmt.Fprint(w, lower.FormatTable(rows))
	fmt.Fprintf(w, "\nsent per device per step, ring collectives over N = %d: DP all-reduces the gradients, 2(N−1)/N·Ψ elements;\n", cfg.Devices)
	fmt.Fprintf(w, "ZeRO-1/2 reduce-scatter gradients and all-gather parameters, the same 2(N−1)/N·Ψ; ZeRO-3 all-gathers parameters\n")
	fmt.Fprintf(w, "again for the backward, 3(N−1)/N·Ψ; %g bytes each. Activations are not counted.\n", cfg.ElemBytes)
}

// fewestText renders FewestDevices: 0 means no device count suffices.
func fewestText(n int) string {
	if n == 0 {
		return "none (does not fit)"
	}
	return fmt.Sprint(n)
}
