package rt

import (
	"context"
	"math"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// TestFusedGemmsTrainAsUnfused: lower's gemm fusion (transposes read by
// the GEMMs through their flags) changes no result beyond GEMM rounding:
// the MLP on [dp=2] and on one device, and the tiny GPT on its
// [dp=2, tp=2] mesh and on one device (attention's kᵀ and every
// backward's transposes fused), train 3 steps to the same losses and
// parameters with and without the fusion; each fused run's measured peak
// per device equals its plan's, and the sharded fused run matches the
// single-device fused run.
func TestFusedGemmsTrainAsUnfused(t *testing.T) {
	mlp := "mesh M = [dp=2]\ninput x : f32[16, 12] {S(0)} = normal(0, 1)\ninput t : f32[16, 8] {S(0)} = normal(0, 1)\n" +
		"param W1 : f32[12, 20] = normal(0, 0.3)\nparam W2 : f32[20, 8] = normal(0, 0.3)\n" +
		"train {\n    loss = mse(gelu(x @ W1) @ W2, t)\n    optimizer = adam(lr=0.01)\n    steps = 3\n}\n"
	gpt, _, err := lang.CheckFile("../examples/train/gpt/gpt.mesh", lang.CheckOptions{})
	require.NoError(t, err)
	gpt.Train.Steps = 3
	mg, err := lang.CheckSource("mlp.mesh", []byte(mlp), lang.CheckOptions{})
	require.NoError(t, err)
	for name, g := range map[string]*ir.Graph{"mlp": mg, "gpt": gpt} {
		train := func(single, noFuse bool) *TrainResult {
			opts := lower.Options{Verify: true, NoFuse: noFuse}
			if single {
				opts.Mesh = g.Mesh.Single()
			}
			p, err := lower.Lower(g, opts)
			require.NoError(t, err)
			res, err := Train(context.Background(), p, Options{}, TrainConfig{})
			require.NoError(t, err)
			for _, d := range res.Last.Devices {
				require.Equal(t, p.Peak[d.Device], d.Peak, "%s: measured peak equals the plan's", name)
			}
			return res
		}
		mesh, meshPlain := train(false, false), train(false, true)
		one, onePlain := train(true, false), train(true, true)
		close := func(what string, a, b *TrainResult) {
			for i := range a.Losses {
				require.InEpsilon(t, b.Losses[i], a.Losses[i], 1e-5, "%s %s: loss of step %d", name, what, i+1)
			}
			for i, p := range a.Params {
				x, y := a.Final[i].Float64s(), b.Final[i].Float64s()
				for j := range x {
					require.InDelta(t, y[j], x[j], 1e-5*(1+math.Abs(y[j])), "%s %s: %s[%d]", name, what, p.Name, j)
				}
			}
		}
		close("fused vs unfused on the mesh", mesh, meshPlain)
		close("fused vs unfused on one device", one, onePlain)
		close("fused mesh vs fused single device", mesh, one)
	}
}
