package lower

import (
	"bytes"
	"testing"

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
