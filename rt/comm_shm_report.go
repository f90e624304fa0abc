package rt

// What a shared-memory collective reports: the bytes and ring steps of
// the algorithm Ring would run by message passing, step for step, so that
// explain's figures, the timeline and the bytes tests read the same
// whichever way the data moved.

import "time"

// ringStep is one step of a simulated ring: its phase and the bytes this
// rank sends in it.
type ringStep struct {
	phase string
	bytes int64
}

// reduceScatterSteps appends the ring reduce-scatter's steps, chunk(i)
// being the bytes of chunk i: in step k this rank sends its running sum
// of chunk r−k−1 (the half-precision sum sends chunk r+k+1 straight to
// its owner instead; reduceScatterHalf).
func (g *Ring) reduceScatterSteps(chunk func(i int) int64, direct bool) {
	p, r := g.Size(), g.Rank
	for k := 0; k < p-1; k++ {
		c := mod(r-k-1, p)
		if direct {
			c = mod(r+k+1, p)
		}
		g.shm.steps = append(g.shm.steps, ringStep{"reduce_scatter", chunk(c)})
	}
}

// allGatherSteps appends the ring all-gather's steps: in step k this rank
// forwards block r−k.
func (g *Ring) allGatherSteps(block func(i int) int64) {
	p, r := g.Size(), g.Rank
	for k := 0; k < p-1; k++ {
		g.shm.steps = append(g.shm.steps, ringStep{"all_gather", block(mod(r-k, p))})
	}
}

// account counts the appended steps' bytes as sent and hands them to
// OnStep, or, when the worker draws them itself (stepsLater), leaves
// them for laySteps. The steps did not happen one after another, so
// their times are derived: the collective's measured span, from start
// to now, shared among them in proportion to their bytes.
func (g *Ring) account(start time.Time) {
	var total int64
	for _, s := range g.shm.steps[g.shm.counted:] {
		total += s.bytes
	}
	g.shm.sent.Add(total)
	if g.shm.late {
		g.shm.counted = len(g.shm.steps)
		return
	}
	if g.OnStep != nil && len(g.shm.steps) > 0 {
		g.laySteps(time.Since(start), func(phase string, k int, bytes int64, from, to time.Duration) {
			g.OnStep(phase, k, bytes, start.Add(from), start.Add(to))
		})
	}
	g.shm.steps, g.shm.counted = g.shm.steps[:0], 0
}

// laySteps shares span among the pending steps in proportion to their
// bytes (equally when none has any), calling at with each step's phase,
// its index in the phase and its share [from, to) of the span, and
// forgets them.
func (g *Ring) laySteps(span time.Duration, at func(phase string, k int, bytes int64, from, to time.Duration)) {
	var total int64
	for _, s := range g.shm.steps {
		total += s.bytes
	}
	var done int64
	var from time.Duration
	k := 0
	for i, s := range g.shm.steps {
		done += s.bytes
		to := time.Duration(float64(span) * float64(done) / float64(total))
		if total == 0 {
			to = span * time.Duration(i+1) / time.Duration(len(g.shm.steps))
		}
		if i > 0 && g.shm.steps[i-1].phase != s.phase {
			k = 0 // the next phase numbers its steps from 1 again
		}
		at(s.phase, k, s.bytes, from, to)
		from, k = to, k+1
	}
	g.shm.steps, g.shm.counted = g.shm.steps[:0], 0
}

// stepsLater makes this ring leave its steps for its caller to lay over
// the collective's span (laySteps) instead of timing them itself, and
// says whether it could: only a shared-memory ring can. Its collectives
// then read no clock (began).
func (g *Ring) stepsLater() bool {
	if g.shm == nil {
		return false
	}
	g.shm.late = true
	g.shm.steps, g.shm.counted = g.shm.steps[:0], 0
	return true
}

// began is when a collective starts, for the steps it times itself;
// nothing (no clock read) when its caller lays them (stepsLater).
func (g *Ring) began() time.Time {
	if g.shm.late {
		return time.Time{}
	}
	return time.Now()
}

// sendBytes counts bytes sent by an algorithm that reports no ring steps
// (all-to-all, broadcast, reduce).
func (g *Ring) sendBytes(n int64) { g.shm.sent.Add(n) }
