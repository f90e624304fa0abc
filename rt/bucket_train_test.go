package rt

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// bigGrads is a data-parallel MLP whose gradients are too large for a
// staged bucket (each part runs its own all-reduce, one after another).
const bigGrads = `mesh M = [dp=2]
input x : f32[16, 256] {S(0)} = normal(0, 1)
input t : f32[16, 64] {S(0)} = normal(0, 1)
param W1 : f32[256, 512] {B} = normal(0, 0.05)
param W2 : f32[512, 64] {B} = normal(0, 0.05)
train {
    loss = mse(tanh(x @ W1) @ W2, t)
    optimizer = adam(lr=0.01)
    steps = 3
}
`

// Training with buckets (lower's bucket pass, bucket.go) is training
// without them: the same losses and parameters bit for bit, each
// collective's event on every rank with the bytes it sends alone, the
// rank's bytes in all, and the same peaks, on the shipped examples whose
// gradients share buckets and on one whose parts are too large to stage.
func TestBucketedTrainingIsUnbucketedTraining(t *testing.T) {
	for _, name := range []string{"megatron_dp_tp", "mlp_dp", "transformer_2d", "gpt/gpt", "mlp_zero3", "big gradients"} {
		var g *ir.Graph
		var err error
		if name == "big gradients" {
			g, err = lang.CheckSource("big.mesh", []byte(bigGrads), lang.CheckOptions{})
		} else {
			g, _, err = lang.CheckFile(filepath.Join("..", "examples", "train", name+".mesh"), lang.CheckOptions{})
		}
		require.NoError(t, err)
		g.Train.Steps = 3
		train := func(noBucket bool) (*lower.Plan, *TrainResult) {
			p, err := lower.Lower(g, lower.Options{Verify: true, NoBucket: noBucket})
			require.NoError(t, err)
			res, err := Train(context.Background(), p, Options{}, TrainConfig{})
			require.NoError(t, err)
			return p, res
		}
		ref, alone := train(true)
		p, res := train(false)
		joins := 0
		for _, in := range p.Exec.Programs[0].Instrs {
			if in.Joins {
				joins++
			}
		}
		require.Positive(t, joins, "%s: no bucket", name)
		requireSameTraining(t, alone, res, name)
		require.Equal(t, ref.Peak, p.Peak, "%s: peaks", name)
		for d, st := range res.Last.Devices {
			require.Equal(t, commBytes(alone.Last.Devices[d].Events), commBytes(st.Events), "%s device %d: bytes per collective", name, d)
			require.Equal(t, alone.Last.Devices[d].Peak, st.Peak, "%s device %d: measured peak", name, d)
			require.Equal(t, alone.Last.Devices[d].BytesSent, st.BytesSent, "%s device %d: bytes sent", name, d)
		}
	}
}

// commBytes is the bytes of each collective's event by its name, in order.
func commBytes(evs []Event) map[string][]int64 {
	out := map[string][]int64{}
	for _, e := range evs {
		if e.Kind == "comm" {
			out[e.Name] = append(out[e.Name], e.Bytes)
		}
	}
	return out
}
