package lang

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// budgetTrain has most of what a train block builds: a pipeline of two
// stages, two micro-batches (their inputs sliced), f16 with its loss
// scale, ZeRO-2's reductions as the backward completes each gradient,
// offload, clipping, and a checkpointed function called with an
// expression argument.
const budgetTrain = `mesh M = [pipeline pp=2, dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
input t : f32[8, 4] {S(0)} = normal(0, 1)
input u : f32[8, 4] {S(0)} = normal(0, 1)
param W : f32[4, 4] = normal(0, 0.5)
param V : f32[4, 4] = normal(0, 0.5)
checkpoint def layer(h, w) { return tanh(h @ w) }
train {
    h = layer(x, W)
    stage = 1
    h = layer(h + u, V)
    loss = mse(h, t)
    pipeline = 1f1b
    microbatches = 2
    optimizer = adam(lr=0.05)
    zero = 2
    precision = f16
    clip = 0.5
    offload = optimizer
}
`

// Wherever the size budget runs out — at every unit of the program's
// work in turn — the checker reports the budget's error and nothing
// else: not a function that "returns no value" because its body was
// refused, nor a train block that "needs loss = ..." because the budget
// ran out slicing a micro-batch's inputs; and it does not panic.
func TestBudgetRunningOutAnywhereReportsOnlyItself(t *testing.T) {
	check := func(left int) (work int, err error) {
		f, err := Parse("b.mesh", []byte(budgetTrain))
		require.NoError(t, err)
		c := NewChecker("b.mesh", []byte(budgetTrain), CheckOptions{})
		c.work = MaxWork - left
		err = c.File(f)
		return c.work - (MaxWork - left), err
	}
	total, err := check(MaxWork)
	require.NoError(t, err)
	require.Greater(t, total, 100)
	for left := range total {
		_, err := check(left)
		var list ErrorList
		require.True(t, errors.As(err, &list), "%d units left: %v", left, err)
		require.Len(t, list, 1, "%d units left", left)
		require.True(t, strings.HasPrefix(list[0].Msg, "the program is too large"), "%d units left: %v", left, list)
	}
}
