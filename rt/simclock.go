package rt

import (
	"context"
	"sync"
	"time"

	"github.com/meshrun/meshrun/pipeline"
)

// SimClock is a deterministic clock for the in-process launcher: instead
// of wall time, every rank keeps a simulated time that its pipeline
// actions advance by their modelled cost (charged when the action's mark
// is reached, after everything it received), a receive advances to the
// sender's time plus the link's, and a collective to the latest member's
// arrival. Timelines, bubbles and step times read off it are exact, so
// tests can assert the schedules' figures. Data still moves for real: the
// clock only replaces the timestamps.
type SimClock struct {
	// Action is the modelled time of a pipeline action (nil: zero).
	Action func(a pipeline.Action) time.Duration
	// Link is the time to send bytes from one pipeline rank to another
	// (nil: zero).
	Link func(bytes int64) time.Duration

	mu     sync.Mutex
	cond   *sync.Cond
	posted map[clockKey]time.Duration
}

// clockKey names one timestamp: the n-th send from one rank to another
// with a tag, or one member's arrival at the n-th collective of a group,
// in one execution.
type clockKey struct {
	kind, a, b, tag, seq int
}

const (
	sendStamp = iota
	arrivalStamp
)

// reset forgets the last execution's timestamps (every rank finished it).
func (c *SimClock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.posted = nil
}

func (c *SimClock) post(k clockKey, t time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.posted == nil {
		c.posted = map[clockKey]time.Duration{}
		c.cond = sync.NewCond(&c.mu)
	}
	c.posted[k] = t
	c.cond.Broadcast()
}

// wait returns the timestamp posted under k, waiting for it (the data it
// stamps has arrived, so its sender posts it before or at once).
func (c *SimClock) wait(ctx context.Context, k clockKey) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.posted == nil {
		c.posted = map[clockKey]time.Duration{}
		c.cond = sync.NewCond(&c.mu)
	}
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.cond.Broadcast()
	})
	defer stop()
	for {
		if t, ok := c.posted[k]; ok {
			return t, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		c.cond.Wait()
	}
}

// clockState is one execution's simulated time on one rank.
type clockState struct {
	c     *SimClock
	rank  int
	now   time.Duration
	sends map[[2]int]int // (peer, tag) → sends so far
	recvs map[[2]int]int
	colls map[int]int // group → collectives so far
}

func newClockState(c *SimClock, rank int) *clockState {
	return &clockState{c: c, rank: rank, sends: map[[2]int]int{}, recvs: map[[2]int]int{}, colls: map[int]int{}}
}

// send stamps the next message to peer with tag.
func (s *clockState) send(peer, tag int) {
	k := [2]int{peer, tag}
	s.c.post(clockKey{sendStamp, s.rank, peer, tag, s.sends[k]}, s.now)
	s.sends[k]++
}

// recv moves the clock to when the next message from peer with tag,
// which has arrived, was sent, plus the link's time.
func (s *clockState) recv(ctx context.Context, peer, tag int, bytes int64) error {
	k := [2]int{peer, tag}
	t, err := s.c.wait(ctx, clockKey{sendStamp, peer, s.rank, tag, s.recvs[k]})
	if err != nil {
		return err
	}
	s.recvs[k]++
	if s.c.Link != nil {
		t += s.c.Link(bytes)
	}
	s.now = max(s.now, t)
	return nil
}

// arrive stamps this rank's arrival at the next collective of group g.
func (s *clockState) arrive(g int, members []int) {
	s.c.post(clockKey{arrivalStamp, g, members[0], s.rank, s.colls[g]}, s.now)
}

// leave moves the clock to the last member's arrival at the collective
// (which every member reached, since it completed).
func (s *clockState) leave(ctx context.Context, g int, members []int) error {
	for _, m := range members {
		t, err := s.c.wait(ctx, clockKey{arrivalStamp, g, members[0], m, s.colls[g]})
		if err != nil {
			return err
		}
		s.now = max(s.now, t)
	}
	s.colls[g]++
	return nil
}

// mark charges a finished action's modelled time.
func (s *clockState) mark(a pipeline.Action) {
	if s.c.Action != nil {
		s.now += s.c.Action(a)
	}
}
