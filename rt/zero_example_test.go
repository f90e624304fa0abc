package rt

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// paramBytesSent is what a device sent in a step for the parameters and
// their gradients: all but the loss's all-reduce (one scalar, whose ring
// chunks differ by device).
func paramBytesSent(d DeviceStats) int64 {
	var n int64
	for _, e := range d.Events {
		if e.Kind == "comm" && !strings.Contains(e.Name, "train.loss") {
			n += e.Bytes
		}
	}
	return n
}

// shippedZeRO lowers examples/train/mlp_zero3.mesh with zero = stage,
// trained for two steps (the figures are per step).
func shippedZeRO(t *testing.T, stage int) *lower.Plan {
	src, err := os.ReadFile("../examples/train/mlp_zero3.mesh")
	require.NoError(t, err)
	s := strings.Replace(string(src), "zero = 3", fmt.Sprintf("zero = %d", stage), 1)
	s = strings.Replace(s, "steps = 30", "steps = 2", 1)
	require.Contains(t, s, fmt.Sprintf("zero = %d", stage))
	g, err := lang.CheckSource("../examples/train/z.mesh", []byte(s), lang.CheckOptions{Dir: "../examples/train"})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	return p
}

// The shipped ZeRO example, trained on the CPU runtime at every stage,
// shows the ZeRO paper's figures in what the runtime measures: the bytes
// each device sent in a step (ZeRO-1 and 2 what DP sends, ZeRO-3 about
// 1.5× — 1.48×, W1 is not gathered again for the backward) and each
// device's peak (every stage below the one before it; ZeRO-2 below ZeRO-1
// because it frees each full gradient as soon as it is reduce-scattered).
// The measured figures equal explain's, and every stage trains like one
// device.
func TestShippedZeROExampleMeasured(t *testing.T) {
	single, err := lower.Lower(shippedZeRO(t, 0).Graph, lower.Options{Mesh: shippedZeRO(t, 0).Mesh.Single()})
	require.NoError(t, err)
	ref, err := Train(context.Background(), single, Options{}, TrainConfig{})
	require.NoError(t, err)
	sent := make([]int64, 4)
	peak := make([]int64, 4)
	for z := range 4 {
		p := shippedZeRO(t, z)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		devs := res.Last.Devices
		require.Len(t, devs, 4)
		for d := range devs {
			require.Equal(t, paramBytesSent(devs[0]), paramBytesSent(devs[d]), "zero=%d: devices send alike", z)
			require.Equal(t, devs[0].Peak, devs[d].Peak, "zero=%d: devices peak alike", z)
		}
		sent[z], peak[z] = paramBytesSent(devs[0]), devs[0].Peak
		r := lower.Explain(p)
		var model float64
		for _, c := range r.Collectives {
			if c.Value != "train.loss" {
				model += c.Bytes
			}
		}
		require.Equal(t, model, float64(sent[z]), "zero=%d: measured bytes are explain's", z)
		require.Equal(t, r.Totals.MaxPeakBytes, peak[z], "zero=%d: measured peak is explain's", z)
		for i, prm := range ref.Params {
			d := CompareTensors(res.Param(prm.Name), ref.Final[i], 1e-5, 1e-6)
			require.True(t, d.OK, "zero=%d param %s off the single device by %g", z, prm.Name, d.MaxAbs)
		}
	}
	t.Logf("bytes sent per device per step %v, peak %v", sent, peak)
	require.Equal(t, sent[0], sent[1])
	require.Equal(t, sent[0], sent[2])
	ratio := float64(sent[3]) / float64(sent[0])
	require.True(t, ratio > 1.45 && ratio <= 1.5, "ZeRO-3 sends %.3f× DP", ratio)
	for z := 1; z < 4; z++ {
		require.Less(t, peak[z], peak[z-1], "peak of ZeRO-%d below the stage before", z)
	}
}
