// Package lang is meshrun's front end: the parser (participle, ast.go, fed
// by a hand-written lexer of the token rules in lexer.go) and the
// checker, which turns a parsed file into a typed graph (package ir).
//
// The checker evaluates the program statement by statement, the way an
// interpreter would, but builds values instead of computing them: a
// function call is expanded at its call site in a fresh scope, a for loop
// is unrolled, a train block's body is checked and differentiated (package
// ad) for its first micro-batch and copied onto the others' input rows
// (train_micro.go), and every op's type rule (package ops) gives
// the result's dtype and shape. Numbers fold at compile time and become
// scalar constants when they meet a tensor. Each value joins the graph
// through an ir.Builder, so the graph is well formed by construction.
//
// Errors are collected, not fatal, and reported sorted by position. One
// mistake yields one error: an operand that failed is marked bad, a name
// whose definition failed (or a mesh, or a use) is recorded as broken, and
// nothing built on either reports again — the same rule go/types applies
// to invalid types.
//
// Two limits keep checking bounded whatever the program says. A tensor's
// element count is computed with overflow checks (package size) and may not
// exceed 2^40, wherever the shape comes from: a declaration, or an op's
// result. And one expansion budget (MaxWork) counts every statement
// checked and every value built, loops, calls and micro-batches unrolled
// (a copied micro-batch spends what checking it would have);
// the line that crosses it is the error, and checking stops there. Work
// per unit is constant — autodiff walks only the loss's cone, never the
// whole graph — so checking time grows linearly with the expanded program.
package lang
