package rt

import (
	"context"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

func deepProgram(checkpoint bool) string {
	def := "def"
	if checkpoint {
		def = "checkpoint def"
	}
	var b strings.Builder
	b.WriteString(`mesh M = [dp=2]
input x : f32[64, 32] {S(0)} = normal(0, 1)
input t : f32[64, 32] {S(0)} = normal(0, 1)
`)
	for i := 0; i < 8; i++ {
		b.WriteString("param W" + string(rune('0'+i)) + " : f32[32, 32] {B} = normal(0, 0.2)\n")
	}
	b.WriteString(def + ` block(h, W) {
    a = tanh(h @ W)
    b = sigmoid(a * 2) + a
    return exp(-b * b) + h
}
train {
    h = x
`)
	for i := 0; i < 8; i++ {
		b.WriteString("    h = block(h, W" + string(rune('0'+i)) + ")\n")
	}
	b.WriteString(`    loss = mse(h, t)
    optimizer = sgd(lr=0.05)
    steps = 3
}
`)
	return b.String()
}

// TestActivationCheckpointing: marking the block `checkpoint def` gives
// bit-identical training and a lower measured peak memory.
func TestActivationCheckpointing(t *testing.T) {
	run := func(ck bool) (*TrainResult, int64) {
		src := deepProgram(ck)
		g, err := lang.CheckSource("deep.mesh", []byte(src), lang.CheckOptions{})
		require.NoError(t, err, lang.Render(err, map[string][]byte{"deep.mesh": []byte(src)}))
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		var peak int64
		for _, d := range res.Last.Devices {
			peak = max(peak, d.Peak)
			require.Equal(t, p.Peak[d.Device], d.Peak, "measured peak equals the plan's")
		}
		return res, peak
	}
	plain, plainPeak := run(false)
	ck, ckPeak := run(true)
	require.Equal(t, plain.Losses, ck.Losses)
	for i := range plain.Final {
		require.Equal(t, plain.Final[i].Data, ck.Final[i].Data, "param %s", plain.Params[i].Name)
	}
	t.Logf("peak bytes per device: %d without, %d with checkpointing", plainPeak, ckPeak)
	require.Less(t, float64(ckPeak), 0.8*float64(plainPeak), "checkpointing must cut the activation peak")
}
