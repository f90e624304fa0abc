package planner

import (
	"fmt"
	"slices"
	"strings"
)

// Candidate is one strategy: a mesh (the declared axes' sizes and a
// pipeline axis of PP ranks at position PPPos among them), micro-batches
// per step, the pipeline schedule, the ZeRO stage and which of the train
// block's functions are checkpointed.
type Candidate struct {
	Sizes    []int // per Program.Axes
	PP       int   // pipeline ranks; 1: no pipeline axis
	PPPos    int   // where the pipeline axis goes among Program.Axes
	Micro    int   // micro-batches per step (accumulate / microbatches); 1: none
	Schedule string
	Zero     int
	// Offload keeps the optimizer states and the update in host memory
	// (offload = optimizer), with or without a pipeline axis.
	Offload    bool
	Checkpoint []bool // per Program.Defs
	// Place overrides declared placements by parameter role or name
	// (Refine), e.g. "Wout" → "{B, B}".
	Place map[string]string
	// batch, when set, rewrites the train block's batch (rows per step):
	// a proxy's fewer micro-batches of the same size (compose.go).
	batch int
}

// Label is the candidate in one line, e.g.
// "[dp=2, pipeline pp=2, tp=8] M=8 1f1b zero=1 checkpoint(block)".
func (c *Candidate) Label(p *Program) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s]", p.meshText(c))
	if c.Micro > 1 || c.PP > 1 {
		fmt.Fprintf(&b, " M=%d", c.Micro)
	}
	if c.PP > 1 {
		b.WriteString(" " + c.Schedule)
	}
	if c.Zero > 0 {
		fmt.Fprintf(&b, " zero=%d", c.Zero)
	}
	if c.Offload {
		b.WriteString(" offload")
	}
	var ck []string
	for i, on := range c.Checkpoint {
		if on {
			ck = append(ck, p.Defs[i].Name)
		}
	}
	if len(ck) > 0 {
		fmt.Fprintf(&b, " checkpoint(%s)", strings.Join(ck, ","))
	}
	roles := make([]string, 0, len(c.Place))
	for r := range c.Place {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	for _, r := range roles {
		fmt.Fprintf(&b, " %s%s", r, c.Place[r])
	}
	return b.String()
}

// Space bounds what is searched; the zero value of a field means the
// default given with it.
type Space struct {
	Schedules []string // with a pipeline axis; default DefaultSchedules
	Zero      []int    // default 0–3 with a train block, else 0
	MaxMicro  int      // largest micro-batch count; default 64
	// NoPipeline keeps the pipeline axis out unless the program declares one.
	NoPipeline bool
	// Offload is searched (with and without) for a train block under a
	// memory budget: it only trades host copies for device memory, so
	// without a budget it can never win and is not priced.
	Offload []bool
}

// DefaultSchedules are the schedules tried on a pipeline axis. naive is
// left out: it is 1F1B's work with no overlap at all.
var DefaultSchedules = []string{"gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv"}

// maxCheckpointDefs: with more functions called from the train block than
// this, checkpointing is searched as all-or-none.
const maxCheckpointDefs = 4

func (s Space) withDefaults(p *Program) Space {
	if len(s.Schedules) == 0 {
		s.Schedules = DefaultSchedules
	}
	if len(s.Zero) == 0 {
		s.Zero = []int{0}
		if p.HasTrain {
			s.Zero = []int{0, 1, 2, 3}
		}
	}
	if s.MaxMicro == 0 {
		s.MaxMicro = 64
	}
	if len(s.Offload) == 0 {
		s.Offload = []bool{false}
	}
	return s
}

// factorisations lists every way to write n as an ordered product of k
// factors.
func factorisations(n, k int) [][]int {
	if k == 1 {
		return [][]int{{n}}
	}
	var out [][]int
	for d := 1; d <= n; d++ {
		if n%d != 0 {
			continue
		}
		for _, rest := range factorisations(n/d, k-1) {
			out = append(out, append([]int{d}, rest...))
		}
	}
	return out
}

// micros are the micro-batch counts tried for a batch of rows: its
// divisors that are powers of two, and the batch itself, up to max.
func micros(rows, max int) []int {
	var out []int
	for m := 1; m <= rows && m <= max; m *= 2 {
		if rows%m == 0 {
			out = append(out, m)
		}
	}
	if rows <= max && !slices.Contains(out, rows) {
		out = append(out, rows)
	}
	return out
}

// checkpointChoices lists the checkpoint settings: every subset of the
// program's blocks, or none/all when there are many.
func checkpointChoices(n int) [][]bool {
	if n > maxCheckpointDefs {
		all := make([]bool, n)
		for i := range all {
			all[i] = true
		}
		return [][]bool{make([]bool, n), all}
	}
	var out [][]bool
	for mask := 0; mask < 1<<n; mask++ {
		c := make([]bool, n)
		for i := range c {
			c[i] = mask&(1<<i) != 0
		}
		out = append(out, c)
	}
	return out
}

// enumerate lists every candidate of the space on n devices, given the
// micro-batch counts the program accepts. ZeRO stages other than 0 are
// left out where the data axis has one device (they store nothing
// differently), as are schedules on a mesh without a pipeline axis and
// pipeline positions right after an axis of size 1 (the same numbering
// of devices as the position before it).
func enumerate(p *Program, s Space, n int, micro []int, dataAxis int) []*Candidate {
	pipes := 1
	if p.HasTrain && (!s.NoPipeline || p.PipePos >= 0) {
		pipes = 2 // the last factor is the pipeline axis
	}
	var out []*Candidate
	for _, f := range factorisations(n, len(p.Axes)+pipes-1) {
		sizes, pp := f[:len(p.Axes)], 1
		if pipes == 2 {
			pp = f[len(f)-1]
		}
		positions := []int{0}
		if pp > 1 {
			positions = positions[:0]
			for i := 0; i <= len(p.Axes); i++ {
				positions = append(positions, i)
			}
		}
		schedules := []string{""}
		if pp > 1 {
			schedules = s.Schedules
		}
		for _, pos := range positions {
			if pos > 0 && sizes[pos-1] == 1 {
				continue // the same device numbering as one place to the left
			}
			for _, m := range micro {
				for _, sched := range schedules {
					for _, z := range s.Zero {
						if z > 0 && (dataAxis < 0 || sizes[dataAxis] == 1) && slices.Contains(s.Zero, 0) {
							continue
						}
						for _, off := range s.Offload {
							for _, ck := range checkpointChoices(len(p.Defs)) {
								out = append(out, &Candidate{Sizes: sizes, PP: pp, PPPos: pos, Micro: m, Schedule: sched, Zero: z, Offload: off, Checkpoint: ck})
							}
						}
					}
				}
			}
		}
	}
	return out
}
