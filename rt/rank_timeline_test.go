package rt

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A rank reads the clock once per instruction: its instruction events
// tile its step (each starts where the previous one ended), and the ring
// steps of an in-process collective, laid over the collective's event by
// the worker, cover it exactly, in order.
func TestRankEventsTileTheStep(t *testing.T) {
	p := compile(t, rowParallelMatmul(4))
	l, err := NewLocal(context.Background(), p.Exec, Options{})
	require.NoError(t, err)
	for range 2 { // the second execution reuses the ranks' goroutines
		res, err := l.Run(context.Background(), nil)
		require.NoError(t, err)
		for _, d := range res.Devices {
			var prev *Event
			var ring []Event
			colls := 0
			for i := range d.Events {
				e := &d.Events[i]
				if e.Kind == "ring" {
					ring = append(ring, *e)
					continue
				}
				if prev != nil {
					require.Equal(t, prev.Start+prev.Dur, e.Start, "device %d: %s starts where %s ended", d.Device, e.Name, prev.Name)
				}
				if e.Kind == "comm" {
					colls++
					require.NotEmpty(t, ring, "device %d: the ring steps come before their collective's event", d.Device)
					require.Equal(t, e.Start, ring[0].Start, "device %d: the first step starts with the collective", d.Device)
					for k := 1; k < len(ring); k++ {
						require.Equal(t, ring[k-1].Start+ring[k-1].Dur, ring[k].Start, "device %d: steps in a row", d.Device)
					}
					last := ring[len(ring)-1]
					require.Equal(t, e.Start+e.Dur, last.Start+last.Dur, "device %d: the last step ends with the collective", d.Device)
					ring = nil
				}
				prev = e
			}
			require.Equal(t, 1, colls, "device %d: one all-reduce", d.Device)
			require.Empty(t, ring, "device %d: no ring step outside a collective", d.Device)
		}
	}
}
