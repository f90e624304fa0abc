package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// estimate's offload row, worked by hand. 7.5B parameters on 64 devices,
// bf16: the device keeps the 2Ψ = 15 GB bf16 copy; the host its 1/64 of
// the f32 masters (4Ψ/64 = 0.47 GB), of the bf16 gradients it receives
// (2Ψ/64 = 0.23 GB) and of Adam's moments (8Ψ/64 = 0.94 GB), 1.64 GB;
// each way 2Ψ/64 = 0.23 GB per step; the collectives are ZeRO-2's. And
// ZeRO-Offload's headline (Ren et al. 2021): a 13B model trains on one
// 32 GB V100 — its device keeps only the 26 GB fp16 copy.
func TestEstimateOffloadRow(t *testing.T) {
	code, out, _ := meshrun(t, "", "estimate", "--params", "7.5e9", "--devices", "64", "--link", "12.5", "--gpu-memory", "32")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "ZeRO-2 + offload device 0.00 GB    15.00 GB  0.00 GB   0.00 GB          15.00 GB 0.23 GB to host   29.53 GB        2.36 s       1")
	require.Contains(t, out, "                 host   0.47 GB    0.00 GB   0.23 GB   0.94 GB          1.64 GB  0.23 GB to device")
	code, out, _ = meshrun(t, "", "estimate", "--params", "13e9", "--devices", "1", "--dtype", "f16", "--gpu-memory", "32")
	require.Equal(t, ExitOK, code)
	require.Regexp(t, `ZeRO-2 \+ offload device 0\.00 GB +26\.00 GB .* 1\n`, out)
	// without offload one device holds 16Ψ = 208 GB even with ZeRO-3,
	// which needs 7 such devices
	require.Regexp(t, `ZeRO-3 .* 208\.00 GB .* 7\n`, out)
}

// explain's memory table for the shipped offload example has estimate's
// words: a device line and a host line per group of devices. The model
// has Ψ = 16·32 + 32 + 32·32 + 32·4 = 1696 parameters on dp = 4 with bf16
// and ZeRO-2; by hand, each host keeps 4Ψ/4 = 1696 B of f32 masters (1.7
// KiB), 8Ψ/4 = 3392 B of Adam's moments (3.3 KiB) and receives 2Ψ/4 =
// 848 B of bf16 gradients; the device
// keeps no model state between steps and no gradients (each leaves as
// the backward reduces it); 848 B are copied each way per step.
func TestExplainOffloadTable(t *testing.T) {
	code, out, errs := meshrun(t, "", "explain", "../../examples/train/mlp_offload.mesh")
	require.Equal(t, ExitOK, code, errs)
	require.Regexp(t, `devices memory parameters optimizer states gradients \(reduced\) activations and other peak +copied per step`, out)
	require.Regexp(t, `d0-3 +device 0 B +0 B +0 B .* 848 B to host`, out)
	require.Regexp(t, `\n +host +1\.7 KiB +3\.3 KiB +848 B .* 848 B to device`, out)
}
