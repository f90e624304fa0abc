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
//     (each subset; all-or-none with more than four of them).
//
// Not searched: the placements themselves — parameters keep their
// declared placements and inference picks every other value's, as it
// does for `meshrun explain`; the order of the declared axes; sequence
// parallelism, mixed precision and offload.
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
// Method: best-first branch and bound over the whole candidate list.
// Every candidate gets a lower bound on its step time from arithmetic
// alone (bound.go: an even share of the FLOPs, the pipeline's fill and
// drain, the gradient reduction on the data axis's link); candidates are
// priced in order of their bounds, and the search stops pricing once the
// next bound is no better than the K-th best step found. The result is
// what pricing every candidate would give, as long as the bounds are
// bounds (the tests compare with Options.Exhaustive). The enumeration
// grows as the number of ordered factorisations of N into the axes
// (for N = 2^k and three axes, (k+1)(k+2)/2) times the positions,
// micro-batch counts, schedules, ZeRO stages and checkpoint subsets;
// each priced candidate costs one check and one lowering, linear in the
// program's values (its layers times its micro-batches). How many are
// priced depends on how close the bounds are: they know nothing of
// tensor-parallel traffic, so a program whose best strategy spends much
// of its step in it prices more.
package planner
