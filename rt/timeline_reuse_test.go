package rt

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// A training step records its timeline over the previous step's (the
// trainer gives it back once OnStep has returned), and what each step's
// OnStep sees is that step's: every instruction once, in program order,
// with the bytes it sent. The last step's timeline, TrainResult.Last's,
// is not recorded over.
func TestTrainReusesTimelines(t *testing.T) {
	p := compile(t, dpSGD(4))
	var first []*Event
	var kept [][]Event
	res, err := Train(context.Background(), p, Options{}, TrainConfig{OnStep: func(s StepInfo) error {
		ev := s.Run.Devices[0].Events
		require.NotEmpty(t, ev)
		first = append(first, &ev[0])
		kept = append(kept, append([]Event(nil), ev...))
		return nil
	}})
	require.NoError(t, err)
	require.Len(t, first, 4)
	for k := 2; k < 4; k++ {
		require.Same(t, first[1], first[k], "step %d records over step %d's timeline", k+1, k)
	}
	for k, ev := range kept {
		sent := wholeTimeline(t, p.Exec.ProgramOf(0), fmt.Sprintf("step %d", k+1), ev)
		require.Positive(t, sent, "step %d: the gradient's all-reduce sent bytes", k+1)
	}
	require.Equal(t, kept[3], res.Last.Devices[0].Events, "the last step's timeline is intact")
}

// A step that fails after recording over the previous step's timeline
// (its context cancelled mid-step) leaves nothing stale behind: the same
// launcher trains again, resumed after step 2, and every step's timeline,
// the last one's included, holds each instruction once in program order.
func TestTimelineAfterAFailedStep(t *testing.T) {
	p := compile(t, dpSGD(5))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var steps atomic.Int32
	opts := Options{Hook: func(rank, instr int) {
		if rank == 1 && instr == 0 && steps.Add(1) == 3 {
			cancel() // step 3, rank 1's first instruction
		}
	}}
	l, err := NewLocal(context.Background(), p.Exec, opts)
	require.NoError(t, err)
	_, err = TrainOn(ctx, l, p, opts, TrainConfig{})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "step 3")
	whole := func(what string, ev []Event) { wholeTimeline(t, p.Exec.ProgramOf(0), what, ev) }
	res, err := TrainOn(context.Background(), l, p, opts, TrainConfig{Start: 2, OnStep: func(s StepInfo) error {
		whole(fmt.Sprintf("step %d", s.Step), s.Run.Devices[0].Events)
		return nil
	}})
	require.NoError(t, err)
	require.Len(t, res.Losses, 3)
	whole("the last step", res.Last.Devices[0].Events)
}

// dpSGD is a data-parallel linear model trained with SGD for steps steps.
func dpSGD(steps int) string {
	return fmt.Sprintf(`mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
param W : f32[4, 4] {B} = normal(0, 0.5)
train {
    loss = mean(x @ W)
    optimizer = sgd(lr=0.1)
    steps = %d
}
`, steps)
}

// wholeTimeline checks that a rank's timeline holds each instruction of
// prog once, in program order (ring steps aside), and returns the bytes
// its events sent.
func wholeTimeline(t *testing.T, prog *plan.Program, what string, ev []Event) (sent int64) {
	t.Helper()
	i := 0
	for _, e := range ev {
		if e.Kind == "ring" {
			continue
		}
		require.Equal(t, labelsOf(prog)[i].event(0, 0, 0).Name, e.Name, "%s, event %d", what, i)
		sent += e.Bytes
		i++
	}
	require.Equal(t, len(prog.Instrs), i, "%s: every instruction once", what)
	return sent
}
