package lower

import (
	"fmt"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
)

// The collectives local functions write are listed by explain like the
// ones the compiler inserts: each single-axis step with its source line,
// its group, the local shapes it takes and gives, the bytes the busiest
// device sends and the modelled time, priced by the same link model.

// writtenCollective are the local view's ops that communicate.
var writtenCollective = map[string]bool{"all_reduce": true, "all_gather": true, "reduce_scatter": true,
	"all_to_all": true, "broadcast": true, "reduce": true, "shift": true}

func explainWritten(p *Plan, r *Report, lines *sourceLines) {
	m := p.Mesh
	for _, v := range p.Values {
		if !v.Local || !writtenCollective[v.Op] {
			continue
		}
		add := func(kind, axis string, size int, bytes, secs float64) {
			cr := CollectiveReport{Index: len(r.Written) + 1, Kind: kind, Axis: axis, GroupSize: size, Value: v.Label(),
				From: ir.ShapeString(v.Args[0].Type.Shape), To: ir.ShapeString(v.Type.Shape), Communicate: true,
				Bytes: bytes, TimeUs: secs * 1e6, Formula: Formula(sbp.Collective(kind)), Cause: "written",
				Where: ir.FormatPos(v.Pos), Line: v.Pos.Line, CalledFrom: formatAll(v.Calls), Source: lines.line(v.Pos.Filename, v.Pos.Line)}
			r.Written = append(r.Written, cr)
			r.Totals.Collectives++
			r.Totals.ByKind[kind]++
			r.Totals.Bytes += bytes
			r.Totals.TimeUs += secs * 1e6
		}
		switch v.Op {
		case "shift": // one send per device, priced on the slowest of its axes' links
			var names []string
			secs, ring := 0.0, 1
			L := float64(v.Type.Numel() * v.Type.DType.Size())
			for _, a := range v.Attrs.Axes {
				names = append(names, m.Axes[a].Name)
				l := p.Planner.Topo.Link(a)
				secs = max(secs, l.Alpha+L*l.Beta)
				ring *= m.Axes[a].Size
			}
			add("shift", strings.Join(names, "×"), ring, L, secs)
		default:
			for _, st := range localSteps(v, m, m.NumAxes()) {
				bytes, secs := sbp.StepCost(m, p.Planner.Topo, st.shape, v.Type.DType.Size(), st.from, st.axis, st.kind)
				if st.kind == sbp.AllReduce {
					bytes = ringAllReduceBytes(v.Type.Numel(), m.Axes[st.axis].Size) * float64(v.Type.DType.Size())
				}
				add(string(st.kind), m.Axes[st.axis].Name, m.Axes[st.axis].Size, bytes, secs)
			}
		}
	}
}

func writeWritten(b textSink, ws []CollectiveReport) {
	if len(ws) == 0 {
		return
	}
	b.WriteString("\ncollectives written in local functions\n")
	tw := newTable("#", "kind", "axis", "value", "local shape", "bytes/device", "time", "at")
	kinds := map[string]bool{}
	for _, c := range ws {
		tw.row(fmt.Sprint(c.Index), c.Kind, c.Axis, c.Value, c.From+" → "+c.To, HumanBytes(c.Bytes), fmt.Sprintf("%.2f us", c.TimeUs),
			fmt.Sprintf("%s%s: %s", shortWhere(c.Where), via(c.CalledFrom), c.Source))
	}
	b.WriteString(tw.String())
	b.WriteString("  formulas (p = group size, G = bytes the group holds, L = local bytes):\n")
	for _, c := range ws {
		if !kinds[c.Kind] {
			kinds[c.Kind] = true
			fmt.Fprintf(b, "    %-14s %s\n", c.Kind, c.Formula)
		}
	}
}

// ringAllReduceBytes is the elements the busiest member sends in the
// runtime's all-reduce of n elements over p members: a ring reduce-scatter
// and all-gather of p balanced chunks, in which member r sends every chunk
// but its own and the next member's once each way (2n − c_r − c_{r+1});
// the model's 2(p−1)/p·n is its average.
func ringAllReduceBytes(n, p int) float64 {
	var most int64
	for r := range int64(p) {
		if p > 1 {
			most = max(most, ringAllReduceSends(int64(n), int64(p), r))
		}
	}
	return float64(most)
}

// ringAllReduceSends is the elements member r sends in that all-reduce.
func ringAllReduceSends(n, p, r int64) int64 {
	return 2*n - chunk(n, p, r) - chunk(n, p, (r+1)%p)
}
