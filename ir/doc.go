// Package ir is meshrun's intermediate representation: the typed graph the
// checker produces from source and every later pass (autodiff, the training
// step, lowering) reads.
//
// A Graph is a list of Values in an order where every value's arguments
// come before it, so a value's ID is its index and one forward sweep visits
// producers before consumers; backward passes sweep in reverse. A value is
// a source (input, param, optimizer state, fed scalar), a constant or an op
// applied to earlier values; its Type is its dtype and global shape, and a
// source or a to() conversion carries the placement the program declares.
// Outputs and the train block's bookkeeping (Train) point into the list.
//
// Values are appended through a Builder, which checks at insertion what
// the order relies on (arguments already in this graph, a valid type) and
// reports a violation as an error, never a panic. Verify checks the whole
// graph after the fact — IDs, order, types, placements, outputs and the
// train block's references — so a pass that rewrites the graph can prove
// it left it well formed.
package ir
