package rt

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/lang"
)

// TestFusedAdamRandomMLPs: on random two-layer MLPs (odd widths, so that
// ZeRO's shards of the parameters and the optimizer states are uneven),
// meshes, ZeRO stages, precisions, accumulation, clipping and offload,
// the Adam fusion changes no bit of training, raises no plan peak, and
// the measured peaks equal the plan's.
func TestFusedAdamRandomMLPs(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 7))
	for i := range 40 {
		dp := []int{1, 2, 3, 4}[rng.IntN(4)]
		batch := dp * []int{2, 4, 6}[rng.IntN(3)]
		in, hid, out := 1+rng.IntN(9), 1+rng.IntN(13), 1+rng.IntN(7)
		opt := []string{"adam(lr=0.01)", "adamw(lr=0.01, weight_decay=0.1)", "adam(lr=0.01, weight_decay=0.1)"}[rng.IntN(3)]
		extra := fmt.Sprintf("    zero = %d\n", rng.IntN(4))
		if rng.IntN(3) == 0 {
			extra += "    precision = " + []string{"f16", "bf16"}[rng.IntN(2)] + "\n"
		}
		if rng.IntN(3) == 0 {
			extra += "    clip = 0.5\n"
		}
		if rng.IntN(3) == 0 {
			extra += "    accumulate = 2\n"
		}
		if rng.IntN(4) == 0 {
			extra += "    offload = optimizer\n"
		}
		src := fmt.Sprintf("mesh M = [dp=%d]\ninput x : f32[%d, %d] {S(0)} = normal(0, 1)\ninput t : f32[%d, %d] {S(0)} = normal(0, 1)\n"+
			"param W1 : f32[%d, %d] = normal(0, 0.3)\nparam b1 : f32[%d] = normal(0, 0.1)\nparam W2 : f32[%d, %d] = normal(0, 0.3)\n"+
			"train {\n    loss = mse(gelu(x @ W1 + b1) @ W2, t)\n    optimizer = %s\n    steps = 2\n    data_axis = dp\n%s}\n",
			dp, batch, in, batch, out, in, hid, hid, hid, out, opt, extra)
		name := fmt.Sprintf("case %d:\n%s", i, src)
		g, err := lang.CheckSource("adam.mesh", []byte(src), lang.CheckOptions{})
		if err != nil {
			t.Logf("%s: not a program: %v", name, err)
			continue
		}
		requireFusionChangesNothing(t, g, name)
	}
}
