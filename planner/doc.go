// Package planner searches the parallel strategy of a program: how to
// split it over N devices (meshrun plan).
//
// What is searched. A candidate is the program rewritten (Program.Source)
// with:
//
//   - the sizes of its declared mesh axes, and of a pipeline axis (the
//     declared one, or "pipeline pp" added when the program has a train
//     block), over every ordered factorisation of N into those axes;
//   - the position of the pipeline axis among the others, which decides
//     which axes are inner (consecutive devices, the fast links);
//   - the micro-batch count M (accumulate, or microbatches with a
//     pipeline): the powers of two dividing the batch and the batch
//     itself, up to 64 — those the program's shapes accept;
//   - the pipeline schedule: gpipe, 1f1b, interleaved(2), zb1p, zbv;
//   - the ZeRO stage 0–3 over the data axis;
//   - activation checkpointing of each function the train block calls
//     (each subset; all-or-none with more than four of them);
//   - under a memory budget, offload = optimizer or not (a pipeline rank
//     offloads its stages' optimizer states):
//     its copies between device and host are priced on HostLink.
//
// Placements: the search keeps every parameter's declared placement and
// lets inference pick every other value's, as `meshrun explain` does.
// Refine (meshrun plan --placements) then tries the other placements of
// each parameter role on the best strategy, one axis at a time, keeping
// what lowers the step: coordinate descent to a local optimum, not an
// exhaustive search (placement.go). Not searched at all: the order of the
// declared axes, sequence parallelism, mixed precision and offloading
// the parameters too (offload = optimizer+params).
//
// How a candidate is priced. Its source is checked and lowered by
// package lower with a link model (Links: consecutive blocks of devices
// joined by faster links, e.g. 8 GPUs on NVLink, then the network), so
// memory is the memory pass's exact per-device peak, split into
// parameters, optimizer states, gradients and the rest as explain splits
// it. Step time walks each rank's program: a kernel costs its FLOPs on
// the local blocks at a stated rate (400 TFLOP/s by default), a
// collective the link model's time for its axis; nothing overlaps.
// With a pipeline, each schedule action's time so summed is fed to the
// schedule simulator (package pipeline) with every send timed on the
// pipeline axis's link; the step is the work before the actions, the
// simulated span, and the optimizer step after.
//
// Method: branch and bound over the whole candidate list. Every
// candidate gets a lower bound on its step time from arithmetic alone
// (bound.go: an even share of the FLOPs, the pipeline's fill and drain,
// the gradient reduction on the data axis's link) and, once a candidate
// of its group (same mesh, micro-batches, stages per rank, checkpointing)
// is priced, from that sibling's time in collectives off the data axis.
// Candidates are priced in the order of a guess (the bound plus
// Megatron's tensor-parallel latency), on GOMAXPROCS workers, and one is
// skipped when its bound is above the K-th best step priced so far —
// which only falls, so nothing skipped could have made the top K. The
// result is what pricing every candidate would give as long as the
// bounds are bounds (the tests compare with Options.Exhaustive); the
// order only decides how soon the good ones are found, and what a time
// limit (Options.TimeLimit) leaves, with the gap to the lowest bound not
// priced.
//
// Composition, for deep programs. When the train block repeats a
// statement (a transformer's layers, fold.go), candidates are first
// priced by composition (compose.go), as Alpa and PipeDream compose a
// pipeline from per-layer profiles: a folded copy of the program keeping
// two of the repeats is lowered on the candidate's inner mesh and links
// with a pipeline stage per unit (a proxy, shared by every candidate with
// the same inner mesh, links, micro-batch size, ZeRO stage, offload and
// checkpointing), and each candidate's step is rebuilt from it — its
// stage cut by the pipeline pass's own balance, each action the sum of
// its units', the schedule simulated — and its memory by replaying its
// units' memory profiles in its schedule's order. Candidates without a
// pipeline are extrapolated from the folded programs with three and four
// repeats (every figure affine in the run's length). The branch and
// bound then runs on composed steps (bounds compared with the tolerance
// the tests establish), and the best composed candidates are priced
// exactly, fastest first, until the top K fit and the next is further
// than the tolerance above the K-th: what plan prints is always the
// candidate's own lowering. Tests: every candidate of a six-layer GPT on
// 16 devices composed within 2% of its exact step (1.0% at worst) and
// 25% of its exact peak; the search's answer equals the exhaustive exact
// search's (search_composed.go).
//
// Scaling. The enumeration grows as the ordered factorisations of N into
// the axes (for N = 2^k and three axes, (k+1)(k+2)/2) times the
// positions, micro-batch counts, schedules, ZeRO stages and checkpoint
// subsets; meshes that split a declared tensor unevenly and pipelines
// with more stages than units are dropped before pricing. Priced by its
// own lowering, a candidate costs one check and one lowering, linear in
// the program's values (layers × micro-batches): about 2.5 CPU-seconds
// for the 96-layer GPT of bench/gptgen with 8 micro-batches. Composed, it
// costs a proxy lowering of a few units and three micro-batches (tens of
// milliseconds, shared by about ten candidates) and a schedule
// simulation: the 96-layer GPT on 4096 devices (3724 candidates) plans
// in 20–40 s on this 2-core machine, independent of the layer count but
// for the exact pricing of the few best (see bench/README.md).
package planner
