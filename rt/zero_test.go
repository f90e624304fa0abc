package rt

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// A data-parallel model whose every parameter is needed by the backward
// pass (W1 is used twice, so the gradient of its first use needs it; W2 is
// needed for the gradient of h): the ZeRO paper's accounting assumes
// exactly this. (A weight whose only use is against a batch that needs no
// gradient is never needed by the backward, and meshrun does not gather
// it again.)
func zeroProgram(zero int) string {
	return fmt.Sprintf(`mesh M = [dp=4]
input x  : f32[16, 8] {S(0)} = normal(0, 1)
param W1 : f32[8, 8]  {B} = normal(0, 0.5)
param W2 : f32[8, 4]  {B} = normal(0, 0.5)
input t  : f32[16, 4] {S(0)} = normal(0, 1)
train {
    h = tanh(tanh(x @ W1) @ W1)
    loss = mse(h @ W2, t)
    optimizer = adam(lr=0.01)
    steps = 4
    zero = %d
}
`, zero)
}

const zeroPsiBytes = (8*8 + 8*4) * 4 // Ψ parameters of 4 bytes

func compileZero(t *testing.T, zero int) *lower.Plan {
	g, err := lang.CheckSource("zero.mesh", []byte(zeroProgram(zero)), lang.CheckOptions{})
	require.NoError(t, err, lang.Render(err, map[string][]byte{"zero.mesh": []byte(zeroProgram(zero))}))
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	return p
}

// TestZeROCommunicationPerStep: the bytes each device sends per step for
// the parameters' gradients and values are 2(p-1)/p·Ψ for DP, ZeRO-1 and
// ZeRO-2 (all-reduce; or reduce-scatter + all-gather) and 3(p-1)/p·Ψ for
// ZeRO-3 (all-gather for the forward, again for the backward, and a
// reduce-scatter) — in the model and as measured by the runtime.
func TestZeROCommunicationPerStep(t *testing.T) {
	p4 := 4.0
	for zero, factor := range map[int]float64{0: 2, 1: 2, 2: 2, 3: 3} {
		p := compileZero(t, zero)
		var model float64
		kinds := map[string]int{}
		for _, c := range p.Convs {
			for _, s := range c.Path.Steps {
				if !s.Kind.Communicates() || c.Value == p.Graph.Train.Loss {
					continue
				}
				model += s.Bytes
				kinds[string(s.Kind)]++
			}
		}
		want := factor * (p4 - 1) / p4 * zeroPsiBytes
		require.Equal(t, want, model, "zero=%d: modelled bytes per step (%v)", zero, kinds)

		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		// measured: everything device 0 sent in the last step, less the
		// loss all-reduce
		var measured float64
		for _, e := range res.Last.Devices[0].Events {
			if e.Kind == "comm" && !strings.Contains(e.Name, "train.loss") {
				measured += float64(e.Bytes)
			}
		}
		require.Equal(t, want, measured, "zero=%d: measured bytes per step", zero)
	}
}

// TestZeROStagesTrainLikeOneDevice: every stage gives the single-device
// losses and parameters.
func TestZeROStagesTrainLikeOneDevice(t *testing.T) {
	var ref *TrainResult
	for zero := 0; zero <= 3; zero++ {
		p := compileZero(t, zero)
		if ref == nil {
			single, err := lower.Lower(p.Graph, lower.Options{Mesh: p.Mesh.Single()})
			require.NoError(t, err)
			ref, err = Train(context.Background(), single, Options{}, TrainConfig{})
			require.NoError(t, err)
		}
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		d := CompareTensors(FromSlice([]int{len(res.Losses)}, res.Losses), FromSlice([]int{len(ref.Losses)}, ref.Losses), 1e-5, 1e-6)
		require.True(t, d.OK, "zero=%d losses %v vs %v", zero, res.Losses, ref.Losses)
		for i, prm := range ref.Params {
			d := CompareTensors(res.Param(prm.Name), ref.Final[i], 1e-5, 1e-6)
			require.True(t, d.OK, "zero=%d param %s off by %g", zero, prm.Name, d.MaxAbs)
		}
	}
}

// TestZeROStateBytesPerDevice: what each device holds between steps (the
// carried parameters and Adam's two moments, fp32) matches the ZeRO
// paper's accounting with 4-byte values: params 4Ψ, optimizer state 8Ψ,
// divided by N_d where the stage shards them.
func TestZeROStateBytesPerDevice(t *testing.T) {
	psi := float64(zeroPsiBytes / 4)
	nd := 4.0
	want := map[int]float64{
		0: 4*psi + 8*psi,
		1: 4*psi + 8*psi/nd,
		2: 4*psi + 8*psi/nd,
		3: (4*psi + 8*psi) / nd,
	}
	for zero := 0; zero <= 3; zero++ {
		p := compileZero(t, zero)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		require.Len(t, res.Last.Devices, int(nd))
		for d, st := range res.Last.Devices {
			require.Equal(t, want[zero], float64(st.Held), "zero=%d device %d", zero, d)
		}
	}
}

// ZeRO-2 reduce-scatters each gradient as soon as the backward completes
// it; ZeRO-1 keeps the full gradients until the backward is done (its
// gradient buffer is not sharded). On a deep model the measured peak shows
// the difference.
func TestZeRO2FreesFullGradientsEarly(t *testing.T) {
	src := func(zero int) string {
		var b strings.Builder
		b.WriteString("mesh M = [dp=4]\ninput x : f32[8, 64] {S(0)} = normal(0, 1)\n")
		for i := 0; i < 6; i++ {
			fmt.Fprintf(&b, "param W%d : f32[64, 64] {B} = normal(0, 0.1)\n", i)
		}
		b.WriteString("train {\n    h = x\n")
		for i := 0; i < 6; i++ {
			fmt.Fprintf(&b, "    h = tanh(h @ W%d)\n", i)
		}
		fmt.Fprintf(&b, "    loss = mean(h * h)\n    optimizer = sgd(lr=0.1)\n    zero = %d\n}\n", zero)
		return b.String()
	}
	peak := func(zero int) (int64, *TrainResult) {
		s := src(zero)
		g, err := lang.CheckSource("z.mesh", []byte(s), lang.CheckOptions{})
		require.NoError(t, err, lang.Render(err, map[string][]byte{"z.mesh": []byte(s)}))
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		return res.Last.Devices[0].Peak, res
	}
	p1, r1 := peak(1)
	p2, r2 := peak(2)
	t.Logf("peak bytes per device: ZeRO-1 %d, ZeRO-2 %d", p1, p2)
	require.Less(t, float64(p2), 0.75*float64(p1))
	d := CompareTensors(r2.Final[0], r1.Final[0], 1e-6, 1e-7)
	require.True(t, d.OK, "the stages compute the same update")
}

// With mixed precision (bf16 compute, Adam) the ZeRO paper's accounting
// holds exactly: between steps a device holds the K = 12 bytes of f32
// master weight, momentum and variance per parameter — all of them under
// DP, a 1/N_d share from stage 1 on — and each step moves 2Ψ, 2Ψ, 2Ψ, 3Ψ
// bytes of 2-byte values (gradients reduced in bf16, parameters gathered
// in bf16).
func TestZeROMixedPrecisionMatchesThePaper(t *testing.T) {
	psi := float64(zeroPsiBytes / 4) // parameters
	nd := 4.0
	for zero, factor := range map[int]float64{0: 2, 1: 2, 2: 2, 3: 3} {
		src := strings.Replace(zeroProgram(zero), "steps = 4", "steps = 4\n    precision = bf16", 1)
		g, err := lang.CheckSource("zero.mesh", []byte(src), lang.CheckOptions{})
		require.NoError(t, err)
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		held := 12 * psi
		if zero > 0 {
			held /= nd
		}
		require.Len(t, res.Last.Devices, int(nd))
		for d, st := range res.Last.Devices {
			require.Equal(t, held, float64(st.Held), "zero=%d device %d: K·Ψ bytes held between steps", zero, d)
		}
		var sent float64
		for _, e := range res.Last.Devices[0].Events {
			if e.Kind == "comm" && !strings.Contains(e.Name, "train.loss") && !strings.Contains(e.Name, "cast#") {
				sent += float64(e.Bytes)
			}
		}
		want := factor * (nd - 1) / nd * 2 * psi // Ψ two-byte values
		require.Equal(t, want, sent, "zero=%d: bytes sent per step", zero)
	}
}
