package pipeline

// loopedPlan describes one rank of the 1F1B family on a looped placement
// (stage s on rank s mod K): 1F1B itself (v = 1), interleaved 1F1B (v ≥ 2)
// and ZB-H1 (split backward).
type loopedPlan struct {
	ranks, v, micro int
	perRound        int  // micro-batches a local stage takes before the next one's turn
	rank            int  // the rank laid out
	warmup          int  // forwards before the first backward
	split           bool // backward as I then W (zero bubble) instead of B
	wDelay          int  // steady steps before W's start following their I's
}

// forwardStage is the stage of the op-th forward: the local stages are
// visited in ascending order, perRound micro-batches each.
func (p loopedPlan) forwardStage(op int) int {
	return (op/p.perRound)%p.v*p.ranks + p.rank
}

// backwardStage is the stage of the op-th step's backward (op ≥ warmup):
// local stages in descending order, perRound micro-batches each.
func (p loopedPlan) backwardStage(op int) int {
	local := p.v - 1 - ((op-p.warmup)/p.perRound)%p.v
	return local*p.ranks + p.rank
}

// loopedRank lays out the rank's actions. Step op < v·M carries a forward,
// step op ≥ warmup a backward, so there are v·M + warmup steps: warm-up
// (forward only), steady (forward then backward), cool-down (backward
// only). With split backwards, a W follows each I once wDelay steady steps
// have passed, for the oldest I still owed; the rest come at the end.
func loopedRank(p loopedPlan) []Action {
	next := map[[2]int]int{} // (kind, stage) -> next micro-batch
	take := func(k Kind, stage int) Action {
		key := [2]int{int(k), stage}
		m := next[key]
		next[key] = m + 1
		return Compute(stage, k, m)
	}
	back := B
	if p.split {
		back = I
	}
	total := p.v*p.micro + p.warmup
	var out []Action
	var owedW []int // stages of I's whose W has not been emitted, oldest first
	for op := range total {
		if op < p.v*p.micro {
			out = append(out, take(F, p.forwardStage(op)))
		}
		if op < p.warmup {
			continue
		}
		st := p.backwardStage(op)
		out = append(out, take(back, st))
		if !p.split {
			continue
		}
		owedW = append(owedW, st)
		if op-p.warmup >= p.wDelay {
			out = append(out, take(W, owedW[0]))
			owedW = owedW[1:]
		}
	}
	for _, st := range owedW {
		out = append(out, take(W, st))
	}
	return out
}

// zbvRank lays out rank r of ZB-V (stages r and 2K−1−r). The phases are
// computed for n = max(M, 2K−1) micro-batches, enough to fill the V, and
// the actions of micro-batches ≥ M are dropped.
func zbvRank(k, micro, r int) []Action {
	v := vRank{micro: micro, first: r, second: 2*k - 1 - r}
	n := max(micro, 2*k-1)
	for range 2*(k-r) - 1 { // fill the first leg of the V
		v.forward(0)
	}
	for range r { // the second leg starts arriving
		v.forward(1)
		v.forward(0)
	}
	for range k - r { // the second stage's first backwards
		v.forward(1)
		v.backward(1, true)
	}
	for v.next[1][F] < v.next[0][F] || v.next[0][F] < n { // steady: (F I W) on each stage in turn
		if v.next[0][F] < n {
			v.forward(0)
		}
		v.backward(0, true)
		v.forward(1)
		v.backward(1, true)
	}
	for range r { // cool-down: input gradients first, weights owed
		v.backward(0, false)
		v.backward(1, false)
	}
	for range k - r {
		v.backward(0, false)
		v.weight(0)
	}
	for v.next[1][W] < v.next[1][I] {
		v.weight(1)
	}
	for v.next[0][W] < v.next[0][I] {
		v.weight(0)
	}
	return v.out
}

// vRank counts, for the two stages of a ZB-V rank (0: the first leg, 1:
// the second), the next micro-batch of each kind.
type vRank struct {
	micro         int
	first, second int
	next          [2][W + 1]int
	out           []Action
}

func (v *vRank) emit(leg int, k Kind) {
	m := v.next[leg][k]
	v.next[leg][k]++
	if m < v.micro { // the padding micro-batches beyond M are dropped
		v.out = append(v.out, Compute([2]int{v.first, v.second}[leg], k, m))
	}
}

func (v *vRank) forward(leg int) { v.emit(leg, F) }
func (v *vRank) weight(leg int)  { v.emit(leg, W) }

// backward emits an I, and its W at once when withWeight.
func (v *vRank) backward(leg int, withWeight bool) {
	v.emit(leg, I)
	if withWeight {
		v.emit(leg, W)
	}
}
