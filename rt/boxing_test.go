package rt

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

func meshSrc(m *mesh.Mesh) string {
	var parts []string
	for _, a := range m.Axes {
		parts = append(parts, fmt.Sprintf("%s=%d", a.Name, a.Size))
	}
	return "mesh M = [" + strings.Join(parts, ", ") + "]\n"
}

// TestBoxingEveryPair converts a tensor between every pair of placements
// (partial included) and checks the value, the per-device memory the
// runtime measured against the plan's, and — where every shard divides
// evenly — the bytes each device sent in each step against the model.
func TestBoxingEveryPair(t *testing.T) {
	cases := []struct {
		m      *mesh.Mesh
		shape  string
		exact  bool // even shards everywhere: measured bytes must equal the model
		sample int  // 0 = all pairs
	}{
		{mesh.New("M", mesh.Axis{Name: "a", Size: 2}), "4, 8", true, 0},
		{mesh.New("M", mesh.Axis{Name: "a", Size: 4}), "4, 8", true, 0},
		{mesh.New("M", mesh.Axis{Name: "a", Size: 3}), "5, 3", false, 0},
		{mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 2}), "4, 8", true, 0},
		{mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 2}), "3, 5", false, 0},
		{mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 3}), "6, 5", false, 0},
		{mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 2}, mesh.Axis{Name: "c", Size: 2}), "4, 5", false, 300},
	}
	if testing.Short() {
		cases = cases[:4]
	}
	r := rand.New(rand.NewSource(7))
	ctx := context.Background()
	for _, c := range cases {
		pls := sbp.All(2, c.m.NumAxes(), true)
		type pair struct{ from, to sbp.NdSBP }
		var pairs []pair
		for _, f := range pls {
			for _, to := range pls {
				pairs = append(pairs, pair{f, to})
			}
		}
		if c.sample > 0 {
			r.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
			pairs = pairs[:c.sample]
		}
		for _, pr := range pairs {
			src := meshSrc(c.m) + "input a : f64[" + c.shape + "] = normal(0, 1)\ny = to(a, " + pr.to.String() + ")\noutput y\n"
			g, err := lang.CheckSource("box.mesh", []byte(src), lang.CheckOptions{})
			require.NoError(t, err, src)
			name := fmt.Sprintf("%s %s: %s -> %s", c.m, c.shape, pr.from, pr.to)
			p, err := lower.Lower(g, lower.Options{Force: map[string]sbp.NdSBP{"a": pr.from}, Verify: true})
			require.NoError(t, err, name)
			res, err := Run(ctx, p, Options{})
			require.NoError(t, err, name)
			ref, err := lower.Lower(g, lower.Options{Mesh: c.m.Single()})
			require.NoError(t, err)
			want, err := Run(ctx, ref, Options{})
			require.NoError(t, err)
			d := CompareTensors(res.Outputs[0], want.Outputs[0], 1e-12, 1e-12)
			require.True(t, d.OK, "%s: wrong value (max abs err %g)", name, d.MaxAbs)
			for dev, st := range res.Devices {
				require.Equal(t, p.Peak[dev], st.Peak, "%s: device %d peak memory", name, dev)
			}
			if !c.exact || len(p.Convs) == 0 {
				continue
			}
			var model []float64
			for _, s := range p.Convs[0].Path.Steps {
				if s.Kind.Communicates() {
					model = append(model, s.Bytes)
				}
			}
			for dev, st := range res.Devices {
				var measured []float64
				for _, e := range st.Events {
					if e.Kind == "comm" {
						measured = append(measured, float64(e.Bytes))
					}
				}
				require.Equal(t, model, measured, "%s: device %d bytes sent per step (model vs measured)", name, dev)
			}
		}
	}
}
