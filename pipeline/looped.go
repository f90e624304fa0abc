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
	n := max(micro, 2*k-1)
	first, second := r, 2*k-1-r
	var out []Action
	f0, f1, i0, i1 := 0, 0, 0, 0
	emit := func(st int, kind Kind, m int) {
		if m < micro {
			out = append(out, Compute(st, kind, m))
		}
	}
	for range 2*(k-r) - 1 { // fill the first leg of the V
		emit(first, F, f0)
		f0++
	}
	for range r { // the second leg starts arriving
		emit(second, F, f1)
		f1++
		emit(first, F, f0)
		f0++
	}
	for range k - r { // the second stage's first backwards
		emit(second, F, f1)
		emit(second, I, i1)
		emit(second, W, i1)
		f1++
		i1++
	}
	for f1 < f0 || f0 < n { // steady: (F I W) on each stage in turn
		if f0 < n {
			emit(first, F, f0)
			f0++
		}
		emit(first, I, i0)
		emit(first, W, i0)
		i0++
		emit(second, F, f1)
		emit(second, I, i1)
		emit(second, W, i1)
		f1++
		i1++
	}
	w0, w1 := i0, i1
	for range r { // cool-down: input gradients first, weights owed
		emit(first, I, i0)
		i0++
		emit(second, I, i1)
		i1++
	}
	for range k - r {
		emit(first, I, i0)
		i0++
		emit(first, W, w0)
		w0++
	}
	for ; w1 < i1; w1++ {
		emit(second, W, w1)
	}
	for ; w0 < i0; w0++ {
		emit(first, W, w0)
	}
	return out
}
