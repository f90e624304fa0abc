package planner

import (
	"fmt"
	"strings"

	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/pipeline"
)

func meshDefault() mesh.Link { return mesh.DefaultLink }

// Lower bounds, which let the search skip a candidate without lowering
// it. Each holds for every plan lowering can make of the candidate:
//
//   - compute: no device does less than an even share, F/(N·rate), of the
//     step's arithmetic F (the live values of the program checked with the
//     candidate's micro-batch count; checkpointing only adds to it). On a
//     pipeline under GPipe or 1F1B the busiest of K ranks, with per-stage
//     times t_s, needs at least Σt_s + (M−1)·max t_s ≥ (F/K)(M+K−1)/M of
//     its share's time, whatever the stage times; interleaved and the
//     zero-bubble schedules get no such factor.
//   - pipeline latency: micro-batch 0 goes forward through all K stages
//     and its gradient back, 2(K−1) sends on the pipeline axis's link,
//     besides its share of compute, (F/K)·K/M per pipeline rank.
//   - gradients: with D > 1 devices on the data axis, every gradient of a
//     parameter the program does not split over that axis is reduced over
//     it, each by a conversion of its own; a device holds at least an even
//     share of those bytes, G·D/N. Plain data parallelism all-reduces
//     them (2(D−1)/D of the bytes, and 2(D−1) latencies at least once:
//     the all-reduces share buckets), ZeRO reduce-scatters them and
//     all-gathers the parameters (the same again, and adjacent ones share
//     buckets too); a pipeline rank reduces its stages' share. Compute and that reduction
//     add up on the busiest device.
//   - memory: a device holds at least an even share of the parameters,
//     over the devices outside the data axis (all N with zero = 3); with
//     mixed precision and ZeRO, of their half-precision copies.
//
//   - siblings: candidates that differ only in ZeRO stage and schedule
//     (with the same stages per rank) make the same collectives on the
//     axes other than the data axis, so once one of a group is priced,
//     its average time in those collectives bounds the others'
//     (groupKey).
//
// Before a group is priced, the bounds know nothing of tensor-parallel
// communication, which placements inference decides: the search is
// exact — it finds what pricing every candidate would — as long as the
// bounds are bounds, and it is fast when they are close.

// timeBound is a lower bound on candidate c's step time.
func (b *base) timeBound(c *Candidate, opts Options) float64 {
	share := b.share(c, opts)
	compute := share
	if c.PP > 1 && (c.Schedule == "gpipe" || c.Schedule == "1f1b") {
		k, m := float64(c.PP), float64(c.Micro)
		compute = share * (m + k - 1) / m
	}
	if c.PP > 1 {
		k, m := float64(c.PP), float64(c.Micro)
		link, _ := opts.Links.Axis(c.fullSizes(), c.PPPos)
		compute = max(compute, 2*(k-1)*link.Alpha+share*k/m)
	}
	return max(compute, share+b.reduce(c, opts))
}

// share is an even share of the step's arithmetic.
func (b *base) share(c *Candidate, opts Options) float64 {
	return b.flops[c.Micro] / float64(opts.Devices) / opts.Rate
}

// reduce bounds a device's time in reducing gradients over the data axis.
func (b *base) reduce(c *Candidate, opts Options) float64 {
	if b.dataAxis < 0 || c.Sizes[b.dataAxis] < 2 {
		return 0
	}
	d := float64(c.Sizes[b.dataAxis])
	link, _ := opts.Links.Axis(c.fullSizes(), b.dataAxisFull(c))
	grads := b.gradB * d / float64(opts.Devices)
	// the all-reduces of plain data parallelism share buckets (lower's
	// bucket pass), which pay the latency once: one latency at least
	count := min(1, float64(b.grads)/float64(c.PP))
	return count*2*(d-1)*link.Alpha + 2*(d-1)/d*grads*link.Beta
}

// groupKey is what the candidates share whose collectives on the axes
// other than the data axis are the same: the mesh, the micro-batches,
// the stages per pipeline rank and the checkpointed functions. ZeRO
// changes only the data axis's collectives; schedules with the same
// stages per rank cut the same stages. Checkpointing is part of the key
// because it can change placements, not only add recomputation: on the
// GPT of the tests, [pipeline pp=2, dp=4, tp=2] spends 0.5 ms in
// all-reduces over tp without it and 0.27 ms with it.
type groupKey struct {
	sizes, ckpt   string
	pp, pos, m, v int
}

func group(c *Candidate) groupKey {
	v := 1
	if c.Schedule == "zbv" || strings.HasPrefix(c.Schedule, "interleaved") {
		v = 2
		if _, n, err := pipeline.ParseSpec(c.Schedule); err == nil && n > 0 {
			v = n
		}
	}
	return groupKey{fmt.Sprint(c.Sizes), fmt.Sprint(c.Checkpoint), c.PP, c.PPPos, c.Micro, v}
}

// siblingBound is a lower bound from a priced candidate of c's group:
// the average device spends at least an even share of the arithmetic,
// the group's least time in collectives off the data axis, and the
// gradient reduction on it. 0 when no sibling has been priced.
func (b *base) siblingBound(c *Candidate, opts Options, model map[groupKey]float64) float64 {
	m, ok := model[group(c)]
	if !ok {
		return 0
	}
	return b.share(c, opts) + m + b.reduce(c, opts)
}

// dataAxisFull is the data axis's index in the candidate's full mesh.
func (b *base) dataAxisFull(c *Candidate) int {
	if c.PP > 1 && b.dataAxis >= c.PPPos {
		return b.dataAxis + 1
	}
	return b.dataAxis
}

// memoryBound is a lower bound on the parameter bytes a device holds.
func (b *base) memoryBound(c *Candidate, n int) float64 {
	if c.Offload {
		return 0 // the parameters live on the host; the device fetches them one at a time
	}
	over := float64(n)
	if c.Zero < 3 && b.dataAxis >= 0 {
		over /= float64(c.Sizes[b.dataAxis])
	}
	held := b.paramB
	if b.half && c.Zero > 0 {
		held /= 2 // the f32 masters are split; the half copy is what is whole
	}
	return held / over
}

// modelGuess is the search's guess at a candidate's time in collectives
// on the axes other than the data axis, used only to order candidates:
// Megatron's four all-reduces per layer and micro-batch (two forward, two
// backward), each 2(t−1) latencies on its axis's link, for every unit a
// pipeline rank holds. It is no bound: inference may do better or worse.
func (b *base) modelGuess(c *Candidate, p *Program, opts Options) float64 {
	full := c.fullSizes()
	guess := 0.0
	for i, n := range c.Sizes {
		if i == b.dataAxis || n < 2 {
			continue
		}
		a := i
		if c.PP > 1 && i >= c.PPPos {
			a++
		}
		link, _ := opts.Links.Axis(full, a)
		guess += 4 * float64(p.Units*c.Micro) / float64(c.PP) * 2 * float64(n-1) * link.Alpha
	}
	return guess
}
