// Package ad is reverse-mode automatic differentiation as a pass over the
// IR (package ir).
//
// Backward(y) builds the backward graph of a scalar y: every value that y
// depends on and that depends on some float source gets an adjoint,
// visited in reverse program order, each op's vector-Jacobian product
// (registered with the op in package ops) written with ordinary ops and the
// gradient helper ops. Backward values are ordinary graph values —
// placement inference and boxing treat them like forward ones, which is
// where the duality of backward placements comes from: the gradient of a
// replicated parameter computed from split activations comes out partial
// and is reduced by the boxing its consumer needs. Adjoints no one uses are
// removed by lowering's dead-code pass.
//
// Two memory policies shape what the backward reads: a value computed
// inside a checkpointed function (Remat) is recomputed at its first
// backward use instead of kept alive, and a ZeRO-3 parameter gather
// (Regather) is repeated instead of kept from the forward. A hook can
// watch a value and replace its adjoint the moment it is complete (ZeRO-2
// reduce-scatters each gradient as soon as the backward finishes it).
package ad
