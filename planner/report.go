package planner

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/lower"
)

// Text is the search's report: how much was searched, the best
// strategies with their memory and step-time splits, and why the best
// of the other meshes lost.
func (r *Result) Text() string {
	var b strings.Builder
	o := r.Opts
	budget := "no memory budget"
	if o.Memory > 0 {
		budget = "memory budget " + lower.HumanBytes(float64(o.Memory)) + " per device"
	}
	fmt.Fprintf(&b, "plan for %s on %d devices: links %s, compute at %g TFLOP/s, %s\n", r.Prog.Path, o.Devices, o.Links, o.Rate/1e12, budget)
	rejected := 0
	for _, n := range r.Rejected {
		rejected += n
	}
	if r.Uneven > 0 {
		fmt.Fprintf(&b, "%d candidates left out: their mesh splits a declared tensor (or the micro-batch) unevenly\n", r.Uneven)
	}
	if r.FewUnits > 0 {
		fmt.Fprintf(&b, "%d candidates left out: more pipeline stages than the train block has units (%d)\n", r.FewUnits, r.Prog.Units)
	}
	if f := r.Folded; f != nil {
		fmt.Fprintf(&b, "folded the train block's %d units to %d (%s) and lowered the folded program %d times\n",
			len(f.Unit), f.Units, f.runsText(), r.Proxies)
		fmt.Fprintf(&b, "searched %d candidates in %.1f s (%.1f s checking the program per micro-batch count): %d modelled by composition, %d priced exactly (checked, lowered, simulated), %d skipped by the time bound, %d by the memory bound; %d rejected by the checker or lowering\n\n",
			r.Candidates, r.Elapsed.Seconds(), r.Analysis.Seconds(), r.Composed, r.Priced, r.PrunedTime, r.PrunedMemory, rejected)
	} else {
		fmt.Fprintf(&b, "searched %d candidates in %.1f s (%.1f s checking the program per micro-batch count): %d priced (checked, lowered, simulated), %d skipped by the time bound (%d of them by a priced sibling's), %d by the memory bound; %d rejected by the checker or lowering\n\n",
			r.Candidates, r.Elapsed.Seconds(), r.Analysis.Seconds(), r.Priced, r.PrunedTime, r.PrunedSibling, r.PrunedMemory, rejected)
	}
	if r.Stopped {
		fmt.Fprintf(&b, "stopped at the time limit with %d candidates left unpriced; none of them can be faster than %s", r.Left, seconds(r.Unpriced))
		if len(r.Ranked) > 0 {
			fmt.Fprintf(&b, ", so the best below is at most %.1f%% slower than the optimum", 100*max(0, r.Ranked[0].Cost.Step/r.Unpriced-1))
		}
		b.WriteString("\n\n")
	}
	if len(r.Ranked) == 0 {
		b.WriteString("no strategy fits")
		if o.Memory > 0 {
			b.WriteString(" the memory budget")
		}
		b.WriteString(".\n")
	} else {
		b.WriteString(table(r.Ranked))
	}
	if why := r.why(); len(why) > 0 {
		b.WriteString("\nwhy the others lost (against the best):\n")
		for _, w := range why {
			b.WriteString("  " + w + "\n")
		}
	}
	if len(r.Rejected) > 0 {
		b.WriteString("\nrejected candidates, by reason:\n")
		msgs := make([]string, 0, len(r.Rejected))
		for m := range r.Rejected {
			msgs = append(msgs, m)
		}
		sort.Slice(msgs, func(i, j int) bool {
			return r.Rejected[msgs[i]] > r.Rejected[msgs[j]] || r.Rejected[msgs[i]] == r.Rejected[msgs[j]] && msgs[i] < msgs[j]
		})
		for i, m := range msgs {
			if i == 8 {
				fmt.Fprintf(&b, "  … and %d other reasons\n", len(msgs)-i)
				break
			}
			fmt.Fprintf(&b, "  %4d  %s\n", r.Rejected[m], m)
		}
	}
	return b.String()
}

// kinds are the collective kinds with time in any of evs, in order.
func kinds(evs []*Evaluated) []string {
	var ks []string
	for _, e := range evs {
		for k, t := range e.Cost.Comm {
			if t > 0 && !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
	}
	slices.Sort(ks)
	return ks
}

func table(evs []*Evaluated) string {
	ks := kinds(evs)
	head := []string{"#", "strategy", "step", "compute"}
	head = append(head, ks...)
	head = append(head, "bubble", "parameters", "optimizer states", "gradients (reduced)", "activations and other", "peak")
	rows := [][]string{head}
	for i, e := range evs {
		c := e.Cost
		row := []string{fmt.Sprint(i + 1), e.Label, seconds(c.Step), seconds(c.Compute)}
		for _, k := range ks {
			row = append(row, seconds(c.Comm[k]))
		}
		row = append(row, seconds(c.Bubble), hb(c.Params), hb(c.Optimizer), hb(c.Gradients), hb(c.Activations), hb(c.Peak))
		rows = append(rows, row)
	}
	return lower.FormatTable(rows)
}

func hb(n int64) string { return lower.HumanBytes(float64(n)) }

// seconds writes a duration with a unit that keeps 3 significant digits.
func seconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-6:
		return fmt.Sprintf("%.3g ns", s*1e9)
	case s < 1e-3:
		return fmt.Sprintf("%.3g µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g s", s)
}

// why explains, for the best candidate of each other mesh (up to Top of
// them, fastest first), the term that differs most from the winner's.
func (r *Result) why() []string {
	if len(r.Ranked) == 0 {
		return nil
	}
	best := r.Ranked[0]
	seen := map[string]bool{}
	for _, e := range r.Ranked {
		seen[meshKey(e.Cand)] = true
	}
	var out []string
	for _, e := range r.Losers {
		k := meshKey(e.Cand)
		if seen[k] {
			continue
		}
		seen[k] = true
		line := e.Label + ": " + r.reason(best, e)
		if e.Composed {
			line += " (modelled)"
		}
		out = append(out, line)
		if len(out) == r.Opts.Top {
			break
		}
	}
	return out
}

func meshKey(c *Candidate) string { return fmt.Sprint(c.Sizes, c.PP, c.PPPos) }

// reason names the term of e's step (or memory) that is furthest above
// the winner's, with the links of the axes that make it.
func (r *Result) reason(best, e *Evaluated) string {
	if !e.Fits {
		return fmt.Sprintf("peak %s is over the budget of %s (parameters %s, optimizer states %s, activations and other %s)",
			hb(e.Cost.Peak), hb(r.Opts.Memory), hb(e.Cost.Params), hb(e.Cost.Optimizer), hb(e.Cost.Activations))
	}
	terms := map[string][2]float64{
		"compute": {e.Cost.Compute, best.Cost.Compute},
		"bubble":  {e.Cost.Bubble, best.Cost.Bubble},
	}
	for _, c := range []*Cost{e.Cost, best.Cost} {
		for k := range c.ByAxis {
			terms[k] = [2]float64{e.Cost.ByAxis[k], best.Cost.ByAxis[k]}
		}
	}
	keys := mapsKeys(terms)
	slices.Sort(keys)
	name, diff := "", math.Inf(-1)
	for _, k := range keys {
		if d := terms[k][0] - terms[k][1]; d > diff {
			name, diff = k, d
		}
	}
	t := terms[name]
	what := name
	if _, axis, ok := strings.Cut(name, " over "); ok {
		what += " (" + r.axisLink(e.Cand, axis) + ")"
	}
	s := fmt.Sprintf("step %s vs %s; %s %s vs %s", seconds(e.Cost.Step), seconds(best.Cost.Step), what, seconds(t[0]), seconds(t[1]))
	if t[1] > 0 {
		s += fmt.Sprintf(", %.1f×", t[0]/t[1])
	}
	return s
}

// axisLink describes an axis of c's mesh: its size and link.
func (r *Result) axisLink(c *Candidate, axis string) string {
	full := c.fullSizes()
	names := slices.Clone(r.Prog.Axes)
	if c.PP > 1 {
		names = slices.Insert(names, c.PPPos, r.Prog.PipeName)
	}
	a := slices.Index(names, axis)
	if a < 0 {
		return axis
	}
	l, lv := r.Opts.Links.Axis(full, a)
	where := "inside a block of the innermost link level"
	if lv > 0 {
		where = fmt.Sprintf("spans level %d", lv+1)
	}
	if len(r.Opts.Links.Levels) == 1 {
		where = "uniform links"
	}
	return fmt.Sprintf("%s=%d, %s: %g µs, %g GB/s", axis, full[a], where, l.Alpha*1e6, 1/l.Beta/1e9)
}

func mapsKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// runsText names the fold's runs: "a run of 96 repeated statements kept
// as 2", or with several, "runs of 4 and 4 repeated statements, each kept
// as 2".
func (f *foldPlan) runsText() string {
	if len(f.Runs) == 1 {
		return fmt.Sprintf("a run of %d repeated statements kept as 2", f.Runs[0].Count+1)
	}
	n := make([]string, len(f.Runs))
	for i, r := range f.Runs {
		n[i] = fmt.Sprint(r.Count + 1)
	}
	return fmt.Sprintf("runs of %s and %s repeated statements, each kept as 2", strings.Join(n[:len(n)-1], ", "), n[len(n)-1])
}
