package rt

import (
	"fmt"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// explain's bytes for every inserted conversion step are what the busiest
// device sent in it, measured: every placement pair on a 2×3 mesh of a
// [7, 5] tensor, whose blocks are uneven along both dims (7 rows over 2
// and 3, 5 columns over 2 and 3), and of a [6, 6] one, whose blocks are
// even. A source cannot be partial, so partial starting points are made
// by a first to() (a local step) and converted by a second.
func TestExplainInsertedBytesAreTheBusiestDevices(t *testing.T) {
	var all []string
	for _, a := range []string{"B", "S(0)", "S(1)", "P"} {
		for _, b := range []string{"B", "S(0)", "S(1)", "P"} {
			all = append(all, "{"+a+", "+b+"}")
		}
	}
	uneven := 0
	for _, shape := range []string{"7, 5", "6, 6"} {
		for _, from := range all {
			for _, to := range all {
				src := fmt.Sprintf("mesh M = [a=2, b=3]\ninput x : f32[%s] {B, B} = normal(0, 1)\ny = to(x, %s)\nz = to(y, %s)\noutput z\n", shape, from, to)
				uneven += requireExplainedBytes(t, src)
			}
		}
	}
	require.Positive(t, uneven, "some steps' busiest device sends more than the even split")
}

// requireExplainedBytes lowers and runs src, and checks each inserted
// step's measured bytes, the most any device sent in it, against
// explain's; it returns how many steps sent more than the model's even
// split.
func requireExplainedBytes(t *testing.T, src string) int {
	t.Helper()
	g, err := lang.CheckSource("b.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err, src)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err, src)
	res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
	require.NoError(t, err, src)
	// the busiest device per step, keyed as explain lists it
	type key struct{ value, kind, axis, from, to string }
	most := map[key]int64{}
	for d, st := range res.Devices {
		prog := p.Exec.ProgramOf(d)
		var evs []Event
		for _, e := range st.Events {
			if e.Kind != "ring" {
				evs = append(evs, e)
			}
		}
		require.Len(t, evs, len(prog.Instrs), "%s: device %d: one event per instruction", src, d)
		for i, in := range prog.Instrs {
			if in.Kind != plan.Collective || !in.Step.Kind.Communicates() {
				continue
			}
			k := key{in.Label, string(in.Step.Kind), p.Mesh.Axes[in.Step.Axis].Name, in.Step.From.String(), in.Step.To.String()}
			most[k] = max(most[k], evs[i].Bytes)
		}
	}
	// the link model's figure for each step: (p−1)/p of the bytes the
	// group holds (twice for an all-reduce), which prices it
	model := map[key]float64{}
	for _, c := range p.Convs {
		for _, st := range c.Path.Steps {
			model[key{c.Value.Label(), string(st.Kind), p.Mesh.Axes[st.Axis].Name, st.From.String(), st.To.String()}] = st.Bytes
		}
	}
	listed := 0
	more := 0
	for _, cr := range lower.Explain(p).Collectives {
		if !cr.Communicate {
			continue
		}
		listed++
		k := key{cr.Value, cr.Kind, cr.Axis, cr.From, cr.To}
		got, ok := most[k]
		require.True(t, ok, "%s: explain lists %v, which no instruction runs", src, k)
		require.Equal(t, float64(got), cr.Bytes, "%s: %v: explain's bytes vs the busiest device's, measured", src, k)
		if float64(got) > model[k]+1e-9 {
			more++
		}
	}
	require.Len(t, most, listed, "%s: every step run is listed once", src)
	return more
}
