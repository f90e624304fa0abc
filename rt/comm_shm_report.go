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
// OnStep. The steps did not happen one after another, so their times are
// derived: the collective's measured span, from start to now, shared
// among them in proportion to their bytes.
func (g *Ring) account(start time.Time) {
	var total int64
	for _, s := range g.shm.steps {
		total += s.bytes
	}
	g.shm.sent.Add(total)
	if g.OnStep != nil && len(g.shm.steps) > 0 {
		span := time.Since(start)
		var done int64
		at, k := start, 0
		for i, s := range g.shm.steps {
			done += s.bytes
			end := start.Add(time.Duration(float64(span) * float64(done) / float64(total)))
			if total == 0 {
				end = start.Add(span * time.Duration(i+1) / time.Duration(len(g.shm.steps)))
			}
			if i > 0 && g.shm.steps[i-1].phase != s.phase {
				k = 0 // the next phase numbers its steps from 1 again
			}
			g.OnStep(s.phase, k, s.bytes, at, end)
			at, k = end, k+1
		}
	}
	g.shm.steps = g.shm.steps[:0]
}

// sendBytes counts bytes sent by an algorithm that reports no ring steps
// (all-to-all, broadcast, reduce).
func (g *Ring) sendBytes(n int64) { g.shm.sent.Add(n) }
