package lower

import (
	"errors"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/stretchr/testify/require"
)

// The fuzz test (lang/fuzz_test.go) fails on ErrInternal and accepts every
// other lowering error, so the two kinds must stay apart: a panicking pass
// and a plan the verifier rejects are internal; a program lowering rejects
// with a message is not.
func TestInternalErrorsAreMarked(t *testing.T) {
	p := compileExample(t, "megatron_mlp")
	require.True(t, p.Opts.Verify)

	err := runPass(p, Pass{Name: "boom", Run: func(*Plan) error { panic("index out of range") }})
	require.ErrorIs(t, err, ErrInternal)
	require.ErrorContains(t, err, "pass boom: index out of range")

	err = runPass(p, Pass{Name: "user", Run: func(*Plan) error { return errors.New("bad program") }})
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrInternal)

	// the pass itself succeeds; the verifier run after it finds the damage
	delete(p.Placement, p.Values[0])
	err = runPass(p, Pass{Name: "noop", Run: func(*Plan) error { return nil }})
	require.ErrorIs(t, err, ErrInternal)
	require.ErrorContains(t, err, "verifier after pass noop")
	require.ErrorContains(t, err, "has no placement")

	// an op without a placement rule is reported at the op, as a user error
	g, err := lang.CheckSource("m.mesh", []byte("mesh M = [a=2]\ninput x : f32[4] = zeros\ny = exp(x)\noutput y\n"), lang.CheckOptions{})
	require.NoError(t, err)
	g.Values[1].Op = "frobnicate"
	_, err = Lower(g, Options{Verify: true})
	require.ErrorContains(t, err, "op frobnicate has no placement rule")
	require.NotErrorIs(t, err, ErrInternal)
}

// The passes keep tables by value ID, so a graph built by hand whose IDs
// are not the values' indices, or whose value reads one of another graph,
// is refused by the check pass with a message, never a panic.
func TestCheckPassRefusesIDsThatAreNotIndices(t *testing.T) {
	src := []byte("mesh M = [a=2]\ninput x : f32[4] = zeros\ny = exp(x)\noutput y\n")
	g, err := lang.CheckSource("m.mesh", src, lang.CheckOptions{})
	require.NoError(t, err)
	g.Values[1].ID = 7
	_, err = Lower(g, Options{})
	require.ErrorContains(t, err, "has ID 7 at index 1")

	g, err = lang.CheckSource("m.mesh", src, lang.CheckOptions{})
	require.NoError(t, err)
	other, err := lang.CheckSource("m.mesh", src, lang.CheckOptions{})
	require.NoError(t, err)
	g.Values[1].Args[0] = other.Values[0] // same ID, another graph's value
	_, err = Lower(g, Options{})
	require.ErrorContains(t, err, "before it is defined")
}
