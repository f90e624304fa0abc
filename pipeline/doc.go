// Package pipeline describes pipeline-parallel schedules as data: for every
// rank of the pipeline axis, the ordered list of actions it executes. It
// generates the named schedules, checks them, inserts the point-to-point
// communication between stages, dry-runs them on a simulated clock, and
// analyses and draws the resulting timelines.
//
// # Actions and schedules
//
// An Action is (stage, kind, micro-batch). The compute kinds are F (forward),
// B (full backward), and the two halves of a split backward used by the
// zero-bubble schedules: I (gradient with respect to the stage's input, on
// the critical path) and W (gradient with respect to the weights, which
// nobody downstream waits for). The communication kinds SEND_F/RECV_F carry
// activations from stage s to s+1 and SEND_B/RECV_B carry gradients from
// stage s back to s−1; a SEND is labelled with the sending stage and a RECV
// with the receiving stage. The text form is PyTorch's: "1F3", "2B0", "0W1",
// "1I2", "1SEND_F3", "2RECV_B0". The last stage's F includes the loss, so
// its backward needs nothing from another stage.
//
// Three data-parallel hooks concern a stage's parameters rather than a
// micro-batch and are written without one: UNSHARD gathers ZeRO-3 sharded
// parameters, RESHARD frees them, REDUCE_GRAD reduces the accumulated
// gradients across the data-parallel group ("0UNSHARD", "1REDUCE_GRAD").
// WithUnshardReshard and WithReduceGrad place them; they are not pipeline
// work and do not count in bubbles.
//
// A Schedule has K ranks, S stages (S = K·v) and M micro-batches;
// StageRank maps each stage to the one rank that holds it. Its String form
// is a header line and one line per rank, and ParseSchedule reads it back.
//
// # Generators
//
// All generators are written in closed form, per rank, without simulation:
//
//   - naive: model parallelism without pipelining. Every rank runs F m then
//     B m for one micro-batch after another, so micro-batch m+1 enters stage
//     0 only after B m has left it and no two stages are ever busy at once.
//     Any M is accepted (M = 1 is the textbook case, the whole batch); each
//     rank idles (K−1)/K of the time whatever M is.
//   - gpipe: every rank runs all M forwards, then all M backwards.
//   - 1f1b: rank r runs min(K−1−r, M) warm-up forwards, then alternates one
//     forward and one backward, then drains the remaining backwards, so
//     stage s never holds more than min(M, K−s) live micro-batches.
//   - interleaved (v ≥ 2 stages per rank, looped: stage s is on rank s mod
//     K): Megatron's interleaved 1F1B as PyTorch generalises it. Forwards run
//     in rounds of p = M/rounds micro-batches per local stage, with
//     rounds = max(1, ⌊M/K⌋); M must be a multiple of rounds, otherwise the
//     generator refuses. Rank r warms up with (v−1)·p + 2(K−1−r) forwards
//     (at most v·M), then alternates forward and backward; forwards visit the
//     local stages in ascending order, backwards in descending order, one
//     round of p micro-batches per visit.
//   - zb1p (ZB-H1 of the zero-bubble paper): 1F1B's warm-up and order with
//     every backward split into I and W. Rank r runs its first r W's late:
//     after the warm-up it only does F and I until r steady steps have
//     passed, then one W after each I, and the W's still owed at the end
//     fill the cool-down bubble. The live activations are those of 1F1B.
//   - zbv (ZB-V): two stages per rank in a V, rank r holding stages r and
//     2K−1−r, so the first and last stage are both on rank 0. Rank r warms
//     up with 2(K−r)−1 forwards of its first stage, r pairs of forwards
//     (second stage, first stage), then K−r (F, I, W) triples of its second
//     stage; the steady phase alternates (F, I, W) of the first stage with
//     (F, I, W) of the second; the cool-down runs r pairs of I's, K−r (I, W)
//     pairs of the first stage and then the owed W's. The phases are laid out
//     for max(M, 2K−1) micro-batches and actions of the nonexistent ones are
//     dropped, as PyTorch does.
//
// # Validation
//
// Validate checks the compute actions of a schedule: every action names a
// stage and micro-batch in range and runs on the rank that holds its stage;
// per stage there is exactly one F for every micro-batch; every micro-batch
// has either one B or one I and one W (so #B + #I = M and #I = #W); each I or
// B comes after its F and each W after its I in the rank's order; a SEND or
// RECV runs on its stage's rank and crosses to an existing stage on another
// rank. A failure
// is a *ScheduleError whose text draws the step × rank grid with the bad
// cell in brackets. For the hooks: a stage with an UNSHARD starts sharded,
// computes only between an UNSHARD and the next RESHARD, and the two
// alternate; REDUCE_GRAD runs at most once, after the weight gradients of
// all M micro-batches. Validate says nothing about deadlocks between ranks:
// that is the simulator's job.
//
// # Communication
//
// WithComm inserts SEND/RECV actions between consecutive stages that live
// on different ranks (adjacent stages on one rank pass tensors in memory).
// A SEND is placed right after the action that produces the tensor and the
// matching RECV right before the action that consumes it. PyTorch instead
// puts the RECV into the receiver's list at the round in which the sender
// sends; placing it at the consumer makes a blocking receive wait only when
// the data is needed, and with buffered sends it cannot add a deadlock. A
// compute schedule that deadlocks by itself is refused as a "malformed
// compute schedule", with the simulator's account of who waits for what.
//
// # Simulation
//
// Simulate dry-runs all ranks at once. Each rank executes its list in order,
// one action at a time. An action starts when the rank is free and its
// inputs are ready: an F needs the previous stage's F of that micro-batch,
// an I or B needs its own F and the next stage's I or B, a W needs its I.
// A hook has no inputs and takes Cost.Collective. In a schedule without
// communication actions a tensor crossing ranks is ready Cost.Comm after
// its producer ends. In a schedule with them, SEND is
// buffered (it takes no time and never blocks), and RECV blocks until the
// matching SEND has run plus Cost.Comm; the compute action then depends on
// its local RECV. Start times depend only on the rank's previous action and
// on the producers, so the result does not depend on the order in which
// ranks are visited. When no rank can proceed and some still have actions,
// the schedule deadlocks; the error names every blocked rank, the action it
// is stuck at and the action it waits for.
//
// # Bubbles and memory
//
// The bubble fraction is idle rank-time over total rank-time:
//
//	bubble = (K·T − Σ busy) / (K·T)
//
// where T is the makespan (the first compute action's start to the last
// one's end, over all ranks) and busy is the union of a rank's compute (F,
// I, W, B) intervals; waiting in RECV and time in hooks count as idle. This
// is the "bubble/total" convention. The Megatron paper's "bubble/ideal"
// ratio divides the same idle time by the busy time instead:
// bubble/total = x/(1+x) for bubble/ideal x.
//
// With unit costs the tests establish, in this convention:
//
//   - GPipe and 1F1B, F = B: (K−1)/(M+K−1); naive: (K−1)/K.
//   - interleaved, F = B per chunk (a chunk being 1/v of a stage):
//     (K−1)/(vM+K−1) for M ≥ K; more when M < K.
//   - zb1p, F = I = W: (K−1)/(3M+K−1) for M ≥ K, exactly a third of
//     1F1B's idle time (its B = I+W); the fraction's ratio to 1F1B's,
//     (M+K−1)/(3M+K−1), approaches 1/3 as M grows.
//   - zbv, F = I = W per chunk, M ≥ 2K: at most (K−1)/(6M+K−1), under 1/13.
//
// PeakInFlight counts, per stage, the micro-batches whose forward has run
// and whose input-gradient backward (I, or the full B) has not. I frees the
// activations the backward consumed; what W still needs (the layers' inputs
// and output gradients) is counted separately by PeakAwaitingW.
package pipeline
