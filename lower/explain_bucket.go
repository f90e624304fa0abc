package lower

// Explain's buckets: the collectives the bucket pass launches together
// (bucket.go), each with the collectives table's rows it holds, its bytes
// and its modelled time. A bucket pays the link's latency once: its time
// is its members' times less the latency terms of every member after the
// first (BucketSaving), and the step's modelled total falls by that much.

import (
	"slices"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// BucketReport is one bucket of one program.
type BucketReport struct {
	Program   int      `json:"program"`
	Kind      string   `json:"kind"`
	Axis      string   `json:"axis"`
	GroupSize int      `json:"group_size"`
	Rows      []int    `json:"collectives"` // the members' rows (CollectiveReport.Index; 0: a written collective's)
	Values    []string `json:"values"`
	Bytes     float64  `json:"bytes_per_device"`
	TimeUs    float64  `json:"time_us"`
	SavedUs   float64  `json:"saved_us"`
}

// BucketSaving is the modelled time a collective that joins a bucket
// saves: the latency terms of its own launch, 2(p−1)α for an all-reduce,
// (p−1)α for a reduce-scatter or all-gather.
func BucketSaving(p *Plan, in *plan.Instr) float64 {
	if !in.Joins {
		return 0
	}
	a := in.Step.Axis // of the plan's mesh, which has the pipeline axis
	n := float64(p.Exec.Mesh.Axes[a].Size)
	if p.Pipe != nil && a > p.Pipe.Axis {
		a-- // the link model's axes are the stage mesh's
	}
	alpha := (n - 1) * p.Planner.Topo.Link(a).Alpha
	if in.Step.Kind == sbp.AllReduce {
		return 2 * alpha
	}
	return alpha
}

// explainBuckets lists every program's buckets and takes their savings
// off the modelled total. A member's row is found by its value, axis and
// placements (a written all-reduce's, whose row names shapes, by its
// value and axis); its bytes and time are its row's, as the totals count
// them.
func explainBuckets(p *Plan, r *Report) {
	rows := map[string][]int{} // a row's key → its indices in r.Collectives, in order
	for i := range r.Collectives {
		c := &r.Collectives[i]
		if plan.Bucketable(sbp.Collective(c.Kind)) {
			k := bucketRowKey(c.Kind, c.Value, c.Axis, c.From, c.To)
			rows[k] = append(rows[k], i)
		}
	}
	written := map[string][]int{} // the same for the written collectives, by value and axis
	for i := range r.Written {
		if c := &r.Written[i]; plan.Bucketable(sbp.Collective(c.Kind)) {
			k := bucketRowKey(c.Kind, c.Value, c.Axis, "", "")
			written[k] = append(written[k], i)
		}
	}
	for pi, prog := range p.Exec.Programs {
		used := map[string]int{}
		claim := func(rs []int, key string) int { // the next unclaimed of rs, or -1
			if used[key] < len(rs) {
				used[key]++
				return rs[used[key]-1]
			}
			return -1
		}
		for i := 0; i < len(prog.Instrs); {
			n := prog.BucketAt(i)
			if n < 2 {
				i++
				continue
			}
			first := &prog.Instrs[i]
			ax := p.Exec.Mesh.Axes[first.Step.Axis]
			br := BucketReport{Program: pi, Kind: string(first.Step.Kind), Axis: ax.Name, GroupSize: ax.Size}
			for k := i; k < i+n; k++ {
				in := &prog.Instrs[k]
				from, to := stagePlacement(p, in.Step.From), stagePlacement(p, in.Step.To)
				row, t := 0, in.Step.Time*1e6
				kind := string(in.Step.Kind)
				key := bucketRowKey(kind, in.Label, ax.Name, from, to)
				wkey := bucketRowKey(kind, in.Label, ax.Name, "", "")
				if x := claim(rows[key], key); x >= 0 {
					c := &r.Collectives[x]
					row, br.Bytes, t = c.Index, br.Bytes+c.Bytes, c.TimeUs
				} else if x := claim(written[wkey], wkey); x >= 0 {
					c := &r.Written[x]
					br.Bytes, t = br.Bytes+c.Bytes, c.TimeUs
				}
				br.Rows = append(br.Rows, row)
				br.Values = append(br.Values, in.Label)
				br.TimeUs += t
				br.SavedUs += BucketSaving(p, in) * 1e6
			}
			br.TimeUs -= br.SavedUs
			r.Totals.TimeUs -= br.SavedUs
			r.Buckets = append(r.Buckets, br)
			i += n
		}
	}
}

// stagePlacement is an instruction's placement as the collectives table
// writes it: over the stage mesh, without the pipeline axis's entry, in a
// pipelined plan (whose instructions' placements span the whole mesh).
func stagePlacement(p *Plan, pl sbp.NdSBP) string {
	if p.Pipe != nil && len(pl) == p.Exec.Mesh.NumAxes() {
		pl = slices.Delete(slices.Clone(pl), p.Pipe.Axis, p.Pipe.Axis+1)
	}
	return pl.String()
}

func bucketRowKey(kind, value, axis, from, to string) string {
	return kind + "\x00" + value + "\x00" + axis + "\x00" + from + "\x00" + to
}

// writeBuckets is the text report's bucket section.
func writeBuckets(b textSink, bs []BucketReport, limit int64) {
	if len(bs) == 0 {
		return
	}
	b.WriteString("\ncollectives launched together (buckets: one latency each, up to " + HumanBytes(float64(limit)) + " a device)\n")
	t := newTable("program", "kind", "axis", "members", "collectives", "bytes/device", "time", "saved")
	for _, br := range bs {
		var ids []string
		for _, r := range br.Rows {
			if r > 0 {
				ids = append(ids, "#"+strconv.Itoa(r))
			}
		}
		if len(ids) < len(br.Rows) {
			ids = append(ids, strconv.Itoa(len(br.Rows)-len(ids))+" written")
		}
		t.row(strconv.Itoa(br.Program), br.Kind, br.Axis, strconv.Itoa(len(br.Rows)), strings.Join(ids, " "), HumanBytes(br.Bytes),
			strconv.FormatFloat(br.TimeUs, 'f', 2, 64)+" us", strconv.FormatFloat(br.SavedUs, 'f', 2, 64)+" us")
	}
	t.writeTo(b)
}
