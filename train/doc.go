// Package train builds a training step as a pass over the IR: given the
// loss and the gradients of a train block (the checker evaluates the
// block's statements, package ad builds the backward), it appends, as
// ordinary graph values, each gradient's reduction into its parameter's
// storage placement, loss-scale unscaling and the overflow flag, optional
// clipping, and the optimizer's update. Each step's new parameters and
// optimizer states are "carried" into the next step (ir.Carry); per-step
// scalars (the learning rate after its schedule, Adam's bias corrections,
// the loss scale) are "hyper" sources the trainer feeds every step.
//
// ZeRO is a choice of storage placement (Storage): with zero = 1 the
// optimizer states are split over the data-parallel axis; 2 also consumes
// gradients in that split form (reduce-scatter rather than all-reduce); 3
// also stores the parameters split and all-gathers them for the forward
// and again for the backward. The collectives are ordinary boxing. No mesh
// axis name is special: the data-parallel axis is named by the block or
// follows from how the inputs are split (DataAxis).
//
// Offload (ZeRO-Offload) moves the update to a host tier: the checker
// makes the parameters host sources and the forward read a fetched copy
// (fetch), Step offloads each reduced gradient (offload; with ZeRO-2/3 the
// backward's reduce hook already did) and marks the optimizer states and
// the update's scalars as host sources (ir.Train.OnHost); everything the
// update computes from them is then host work (package lower's tier pass).
package train
