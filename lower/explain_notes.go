package lower

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/train"
)

// Notes are explain's warnings about combinations that multiply
// communication, each with the figure read from the plan's collectives.
// (ZeRO with pipelines is noted in the pipeline section, explain_pipe.go.)
func explainNotes(p *Plan, r *Report) []string {
	t := p.Graph.Train
	if t == nil || p.Pipe != nil {
		return nil
	}
	var notes []string
	if n := accumulateNote(t.Zero, t.Accumulate, r); n != "" {
		notes = append(notes, n)
	}
	if n := regatherNote(t.Zero, r); n != "" {
		notes = append(notes, n)
	}
	if n := slowLinkNote(p, r); n != "" {
		notes = append(notes, n)
	}
	return notes
}

// accumulateNote: from ZeRO-2 on, a gradient is reduce-scattered as soon
// as a backward completes it, so with gradient accumulation once per
// micro-batch, M times what one reduction after the last micro-batch
// would send (ZeRO-1 does that, keeping the full gradients instead).
func accumulateNote(zero, micro int, r *Report) string {
	if zero < 2 || micro < 2 {
		return ""
	}
	var sent float64
	for _, c := range r.Collectives {
		if c.Kind == "reduce_scatter" && strings.HasSuffix(c.Cause, ".grad") {
			sent += c.Bytes
		}
	}
	if sent == 0 {
		return ""
	}
	return fmt.Sprintf("ZeRO-%d with accumulate = %d: gradients are reduce-scattered once per micro-batch, %s per device per step, %d× the %s of one reduce-scatter after the last micro-batch (zero = 1 sends that, holding full gradients until then)",
		zero, micro, HumanBytes(sent), micro, HumanBytes(sent/float64(micro)))
}

// regatherNote explains a ZeRO-3 figure below the paper's 3Ψ: a
// parameter whose backward does not read it (the first layer's weight
// when its input needs no gradient, a bias) is gathered for the forward
// only.
func regatherNote(zero int, r *Report) string {
	if zero != 3 {
		return ""
	}
	gathered, again := map[string]bool{}, map[string]bool{}
	for _, c := range r.Collectives {
		if c.Kind != "all_gather" {
			continue
		}
		if strings.HasPrefix(c.Cause, "to ") && strings.HasSuffix(c.Cause, ".gathered") {
			gathered[c.Value] = true
		}
		if c.Cause == "regather" {
			again[c.Value] = true
		}
	}
	var once []string
	for name := range gathered {
		if !again[name] {
			once = append(once, name)
		}
	}
	if len(once) == 0 {
		return ""
	}
	sort.Strings(once)
	var dp, sent float64
	for _, c := range r.Collectives {
		if c.Kind == "all_gather" || c.Kind == "reduce_scatter" {
			sent += c.Bytes
			if c.Kind == "reduce_scatter" {
				dp += 2 * c.Bytes // an all-reduce sends twice a reduce-scatter
			}
		}
	}
	return fmt.Sprintf("ZeRO-3 sends %s of gathers and reduce-scatters per device, %.2f× the %s a plain data-parallel all-reduce of these gradients would send (the paper's 1.5× gathers every parameter again for the backward): %s %s gathered for the forward only, since the backward does not read %s",
		HumanBytes(sent), sent/dp, HumanBytes(dp), strings.Join(once, ", "), isAre(len(once)), itThem(len(once)))
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// slowLinkNote warns when a model-parallel axis (any axis but the
// data-parallel one) has the slowest link of the mesh and carries
// collectives every step: tensor parallelism's reductions sit on the
// critical path of every layer, so they belong on the fastest link.
func slowLinkNote(p *Plan, r *Report) string {
	t := p.Graph.Train
	data := t.DataAxis
	if t.Zero == 0 {
		// DataAxis is set only with zero or data_axis; otherwise infer
		// it as the checker would.
		ax, err := train.DataAxis(p.Graph, "", 0)
		if err != nil {
			return ""
		}
		data = ax
	}
	axes := r.Mesh.Axes
	if data < 0 || data >= len(axes) || len(axes) < 2 {
		return ""
	}
	slow := 0
	for i, a := range axes {
		if a.GBPerSec < axes[slow].GBPerSec {
			slow = i
		}
	}
	if slow == data || axes[slow].GBPerSec >= axes[data].GBPerSec {
		return ""
	}
	var sent float64
	kinds := map[string]int{}
	for _, c := range r.Collectives {
		if c.Axis == axes[slow].Name && c.Communicate {
			sent += c.Bytes
			kinds[c.Kind]++
		}
	}
	if sent == 0 {
		return ""
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(ks)
	return fmt.Sprintf("tensor parallelism over the slowest link: %s sends %s per device per step (%s) over its %g GB/s link; %s (data parallel) has %g GB/s — put %s on the fast link (Megatron keeps it inside a node)",
		axes[slow].Name, HumanBytes(sent), strings.Join(ks, ", "), axes[slow].GBPerSec, axes[data].Name, axes[data].GBPerSec, axes[slow].Name)
}
