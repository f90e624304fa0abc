// Package ops is the one place an op is defined. Each op family's file
// registers, once per op, everything the compiler knows about it: its type
// rule (Call in, a typed value out, or the first problem), its placement
// rule (the one-axis SBP signatures, handed on to package sbp, whose
// inference and boxing read them), its gradient and its spec text.
// Adding an op is one Register call here plus one kernel per backend. A
// family file holds its registrations, then its placement signatures, type
// rules and gradients.
//
// Placement rules are data: every one-axis signature (input placements →
// output placement) under which computing the op locally on every device
// yields the declared output placement. Package sbp combines them into nd
// signatures over a mesh; package lower prices and picks among them.
package ops
