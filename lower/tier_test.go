package lower

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

const offloadSrc = `mesh M = [dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
param W : f32[4, 4] {B} = normal(0, 0.5)
param c : f32[4] {B} = zeros
train {
    loss = mse(tanh(x @ W + c), x)
    optimizer = adam(lr=0.01)
    precision = f16
    clip = 1
    zero = 1
    offload = optimizer
}
`

// The tier pass: params, optimizer states and the update's scalars live
// in host memory, the copies the forward reads and everything before the
// offload on the device; the copies are copy instructions; the plan's
// verifier holds every instruction to its tier.
func TestTierPass(t *testing.T) {
	p, err := lowerSource(offloadSrc)
	require.NoError(t, err)
	kinds := map[string]bool{}
	for _, v := range p.Values {
		switch {
		case v.Op == "param" || v.Op == "state":
			require.True(t, p.Host[v], "%s lives on the host", v.Label())
		case v.Op == "hyper" && v.Name == "loss_scale":
			require.False(t, p.Host[v], "the forward's loss scale is the device's")
		case v.Op == "hyper":
			require.True(t, p.Host[v], "%s is fed to the host", v.Label())
		case v.Op == "fetch" || v.Op == "matmul" || v.Op == "tanh":
			require.False(t, p.Host[v], v.Label())
		case v.Op == "offload" || v.Op == "adam_update" || v.Op == "nonfinite" || v.Op == "sqrt":
			require.True(t, p.Host[v], v.Label())
		}
		kinds[v.Op] = true
	}
	for _, op := range []string{"fetch", "offload", "adam_update", "nonfinite", "sqrt"} {
		require.True(t, kinds[op], "the step has %s", op)
	}
	prog := p.Exec.Programs[0]
	var offloads, fetches int
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		require.False(t, in.Kind == plan.Compute && (in.Kernel.Op == "offload" || in.Kernel.Op == "fetch"), "a copy is not a kernel")
		switch in.Kind {
		case plan.Offload:
			offloads++
		case plan.Fetch:
			fetches++
			// fetched just before use: the next instruction reads it
			require.Contains(t, prog.Instrs[i+1].Args, in.Out, "%s is fetched early", in.Label)
		}
	}
	require.Equal(t, 2, offloads) // W's and c's gradients
	require.Equal(t, 2, fetches)  // W's and c's f16 copies
	require.NoError(t, p.Exec.Verify())
	require.Positive(t, p.HostPeak[0])

	// a host instruction reading a device slot is an error the verifier
	// names
	flipped := false
	for i := range prog.Instrs {
		if in := &prog.Instrs[i]; in.Kind == plan.Compute && in.Host && len(in.Args) > 0 {
			in.Host = false
			err := p.Exec.Verify()
			require.Error(t, err)
			require.Contains(t, err.Error(), "in host memory; a compute instruction in device memory reads device memory")
			in.Host, flipped = true, true
			break
		}
	}
	require.True(t, flipped)
	require.NoError(t, p.Exec.Verify())
	// round trip: the tiers travel with the encoded plan
	var buf bytes.Buffer
	require.NoError(t, plan.Encode(&buf, p.Exec))
	back, err := plan.Decode(&buf)
	require.NoError(t, err)
	require.True(t, back.HasHost())
	require.Equal(t, p.Exec.Dump(), back.Dump())
}

// explain's device and host rows and estimate's offload row count the
// same things: on the shipped example (ZeRO-2, bf16, Adam, Ψ = 1696 on 4
// devices) the host's parameters, optimizer states and received gradients
// and the bytes copied each way are EstimateOffload's figures exactly,
// and the device holds no model state and no gradients in either. With 4
// micro-batches ZeRO-2 offloads a piece of each gradient per micro-batch
// (4 times the bytes copied to the host) but the host's gradients are
// still each parameter's once.
func TestExplainOffloadMatchesEstimate(t *testing.T) {
	src, err := os.ReadFile("../examples/train/mlp_offload.mesh")
	require.NoError(t, err)
	explainOffloadMatchesEstimate(t, src, 1)
	micro := strings.Replace(string(src), "train {\n", "train {\n    accumulate = 4\n", 1)
	require.NotEqual(t, string(src), micro)
	explainOffloadMatchesEstimate(t, []byte(micro), 4)
}

func explainOffloadMatchesEstimate(t *testing.T, src []byte, micro int) {
	g, err := lang.CheckSource("mlp_offload.mesh", src, lang.CheckOptions{Dir: "../examples/train"})
	require.NoError(t, err)
	p, err := Lower(g, Options{Verify: true})
	require.NoError(t, err)
	psi := 0
	for _, v := range p.Values {
		if v.Op == "param" {
			psi += v.Type.Numel()
		}
	}
	require.Equal(t, 16*32+32+32*32+32*4, psi)
	est := EstimateOffload(EstimateConfig{Psi: float64(psi), Devices: 4, ElemBytes: 2, K: 12})
	for _, m := range Explain(p).Memory {
		h := m.Host
		require.NotNil(t, h)
		require.Equal(t, []float64{est.Host.Params, est.Host.Optimizer, est.Host.Grads, est.Copied * float64(micro), est.Copied},
			[]float64{float64(h.ParamBytes), float64(h.OptimizerBytes), float64(h.GradientBytes), float64(h.ToHostBytes), float64(h.ToDeviceBytes)}, "device %d, %d micro-batches", m.Device, micro)
		require.Equal(t, []float64{est.Device.Params, est.Device.Optimizer, est.Device.Grads},
			[]float64{float64(m.ParamBytes), float64(m.OptimizerBytes), float64(m.GradientBytes)}, "device %d", m.Device)
	}
}
