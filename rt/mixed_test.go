package rt

import (
	"context"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

func trainPlan(t *testing.T, src string, single bool) (*lower.Plan, *TrainResult) {
	t.Helper()
	g, err := lang.CheckSource("m.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err, lang.Render(err, map[string][]byte{"m.mesh": []byte(src)}))
	opts := lower.Options{Verify: true}
	if single {
		opts.Mesh = g.Mesh.Single()
	}
	p, err := lower.Lower(g, opts)
	require.NoError(t, err)
	res, err := Train(context.Background(), p, Options{}, TrainConfig{})
	require.NoError(t, err)
	return p, res
}

const mixedSrc = `mesh M = [dp=2]
input x : f32[32, 16] {S(0)} = normal(0, 1)
input t : f32[32, 4] {S(0)} = normal(0, 1)
param W1 : f32[16, 32] {B} = normal(0, 0.25)
param W2 : f32[32, 4] {B} = normal(0, 0.2)
train {
    loss = mse(tanh(x @ W1) @ W2, t)
    optimizer = adam(lr=0.01)
    steps = 15
PREC}
`

// bf16 and f16 training: the forward and backward run on half tensors (2
// bytes each), the master weights and Adam's moments stay f32, the loss
// falls like the f32 run's, and the mesh equals one device.
func TestMixedPrecisionTrains(t *testing.T) {
	_, f32 := trainPlan(t, strings.Replace(mixedSrc, "PREC", "", 1), false)
	for _, prec := range []string{"bf16", "f16"} {
		src := strings.Replace(mixedSrc, "PREC", "    precision = "+prec+"\n", 1)
		p, mesh := trainPlan(t, src, false)
		_, one := trainPlan(t, src, true)
		require.Less(t, mesh.Losses[14], 0.8*mesh.Losses[0], prec)
		// f16 skips its first step (the gradients overflow at the initial
		// scale 2^16): its curve is the f32 one, later by the skipped steps
		skipped := len(mesh.Losses) - mesh.Applied
		if prec == "f16" {
			require.Equal(t, 1, skipped)
			require.Equal(t, 65536.0, mesh.Scales[0])
			require.Equal(t, 32768.0, mesh.Scales[1])
		}
		for i := 0; i+skipped < len(mesh.Losses); i++ {
			require.InDelta(t, f32.Losses[i], mesh.Losses[i+skipped], 0.05*f32.Losses[i], "%s step %d vs f32", prec, i+1)
		}
		for i := range mesh.Losses {
			require.InDelta(t, one.Losses[i], mesh.Losses[i], 0.01*one.Losses[i], "%s step %d mesh vs one device", prec, i+1)
		}
		half, master := 0, 0
		for _, v := range p.Values {
			if v.Op == "matmul" && v.Type.DType.String() == prec {
				half++
			}
			if v.Op == "param" && v.Type.DType == ir.F32 {
				master++
			}
		}
		require.Equal(t, 5, half, "%s: forward and backward matmuls run in half", prec)
		require.Equal(t, 2, master, "%s: master weights stay f32", prec)
		require.Equal(t, "f32", mesh.Final[0].DType.String())
	}
}

// f16 with a loss whose gradients overflow at the initial scale: steps are
// skipped (parameters and states unchanged) while the scale halves, until
// the gradients fit; then training proceeds.
func TestLossScalingSkipsOverflowingSteps(t *testing.T) {
	src := `mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = ones
param W : f32[4, 2] {B} = normal(0, 0.1)
train {
    loss = sum(x @ W) * 1.25
    optimizer = sgd(lr=0.001)
    steps = 7
    precision = f16
}
`
	// dL/dW = 1.25·8 = 10 per element; scaled by S it overflows f16 (max
	// 65504) until S ≤ 4096: 65536, 32768, 16384, 8192 overflow.
	_, res := trainPlan(t, src, false)
	require.Equal(t, []float64{65536, 32768, 16384, 8192, 4096, 4096, 4096}, res.Scales)
	require.Equal(t, 3, res.Applied, "four skipped steps, three applied")
	for i := 1; i < 5; i++ {
		require.Equal(t, res.Losses[0], res.Losses[i], "skipped step %d must not change the parameters", i)
	}
	require.Less(t, res.Losses[6], res.Losses[4], "applied steps lower the loss")
	_, one := trainPlan(t, src, true)
	require.Equal(t, res.Scales, one.Scales, "the overflow flag is reduced over every device")
}

func TestGradScalerSchedule(t *testing.T) {
	g := NewGradScaler()
	g.Update(true)
	require.Equal(t, 32768.0, g.Scale)
	for i := 0; i < 1999; i++ {
		g.Update(false)
	}
	require.Equal(t, 32768.0, g.Scale, "not before 2000 clean steps")
	g.Update(false)
	require.Equal(t, 65536.0, g.Scale, "doubled after 2000 clean steps")
	for i := 0; i < 1000; i++ {
		g.Update(false)
	}
	g.Update(true)
	for i := 0; i < 1999; i++ {
		g.Update(false)
	}
	require.Equal(t, 32768.0, g.Scale, "an overflow restarts the count")
}
