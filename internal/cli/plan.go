package cli

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshrun/meshrun/internal/atomicfile"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/planner"
)

// maxPlanDevices bounds --devices: the candidates grow with the number of
// factorisations, and no cluster the planner speaks of is larger.
const maxPlanDevices = 1 << 20

// planFlags are plan's command line.
type planFlags struct {
	devices    int
	memory     memoryFlag
	links      string
	top        int
	tflops     float64
	out        string
	exhaustive bool
	exact      bool
	noPipeline bool
	timeLimit  time.Duration
	refine     bool
}

func (e *env) plan(args []string) int {
	fs := newFlags(e, "plan", "plan FILE --devices N [--memory BYTES] [--links SPEC] [--top K] [--tflops R] [-o FILE]")
	var f planFlags
	fs.IntVar(&f.devices, "devices", 0, "devices to plan for (required): every candidate mesh uses all of them")
	fs.Var(&f.memory, "memory", "memory budget per device, e.g. 80GiB (0 or unset: none)")
	fs.StringVar(&f.links, "links", "", "hierarchical links SIZE:ALPHA_US:GBPS,...,*:ALPHA_US:GBPS, e.g. '8:1:300,*:10:25' (8 devices per node at 300 GB/s, nodes at 25 GB/s); default every axis 5 µs, 100 GB/s")
	fs.IntVar(&f.top, "top", 5, "strategies to show")
	fs.Float64Var(&f.tflops, "tflops", 400, "device compute rate in TFLOP/s (the cost model's)")
	fs.StringVar(&f.out, "o", "", "write the best strategy as a .mesh file")
	fs.BoolVar(&f.exhaustive, "exhaustive", false, "price every candidate instead of pruning with lower bounds (slow; the reference)")
	fs.BoolVar(&f.exact, "exact", false, "price every candidate by its own lowering, not by composition from the folded program (slower on deep programs)")
	fs.DurationVar(&f.timeLimit, "time-limit", 0, "stop pricing after this long and say how far from optimal the best found can be (0: search to the end)")
	fs.BoolVar(&f.refine, "placements", false, "then try other placements of each parameter role on the best strategy (coordinate descent)")
	fs.BoolVar(&f.noPipeline, "no-pipeline", false, "do not add a pipeline axis the program does not declare")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	k := newChecks(e, fs)
	links := f.validate(k, pos)
	if !e.report(k) {
		return ExitUsage
	}
	// the program's own errors, at the user's positions, before any search
	if _, sources, err := lang.CheckFile(pos[0], lang.CheckOptions{}); err != nil {
		e.diag(err, sources)
		return ExitUsage
	}
	prog, err := planner.Load(pos[0])
	if err != nil {
		fmt.Fprintln(e.stderr, "meshrun plan:", err)
		return ExitUsage
	}
	res, err := planner.Search(prog, planner.Options{Devices: f.devices, Memory: f.memory.bytes, Links: links, Rate: f.tflops * 1e12,
		Top: f.top, Exhaustive: f.exhaustive, Exact: f.exact, TimeLimit: f.timeLimit, Space: planner.Space{NoPipeline: f.noPipeline}})
	if err != nil {
		fmt.Fprintln(e.stderr, "meshrun plan:", err)
		return ExitFailure
	}
	fmt.Fprint(e.stdout, res.Text())
	if len(res.Ranked) == 0 {
		return ExitFailure
	}
	best := res.Ranked[0]
	if f.refine {
		ref := planner.Refine(res)
		fmt.Fprint(e.stdout, ref.Text())
		best = ref.Best
	}
	if f.out != "" {
		src := prog.Source(best.Cand, filepath.Dir(f.out))
		err := atomicfile.Write(f.out, func(w io.Writer) error { _, err := io.Copy(w, bytes.NewReader(src)); return err }, nil)
		if err != nil {
			fmt.Fprintln(e.stderr, "meshrun plan:", err)
			return ExitFailure
		}
		fmt.Fprintf(e.stdout, "\nwrote the best strategy to %s (meshrun check %s runs it against one device)\n", f.out, f.out)
	}
	return ExitOK
}

// validate checks plan's flags and returns the link model.
func (f *planFlags) validate(k *checks, pos []string) *planner.Links {
	switch {
	case len(pos) == 0:
		k.fail("missing FILE, the program to plan")
	case len(pos) > 1:
		k.fail("want one FILE, got %d: %s", len(pos), strings.Join(pos, " "))
	}
	switch {
	case !k.set["devices"]:
		k.fail("missing --devices N, the devices to plan for")
	case f.devices < 1 || f.devices > maxPlanDevices:
		k.fail("--devices %d: want 1 to %d", f.devices, maxPlanDevices)
	}
	if f.top < 1 {
		k.fail("--top %d: want at least 1", f.top)
	}
	k.number("tflops", f.tflops, 0, true)
	if f.timeLimit < 0 {
		k.fail("--time-limit %v: want a duration of at least 0", f.timeLimit)
	}
	k.outFile("o", f.out)
	if f.links == "" {
		if k.set["links"] {
			k.fail("--links: the spec is empty")
		}
		return nil
	}
	l, err := planner.ParseLinks(f.links)
	if err != nil {
		k.fail("%v", err)
	}
	return l
}
