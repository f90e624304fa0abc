package lower

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/pipeline"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// PipelineReport is the pipeline part of explain: the schedule, where the
// body was cut into stages and what each costs, and the point-to-point
// traffic lowering inserted between stages.
type PipelineReport struct {
	Axis         string           `json:"axis"`
	Ranks        int              `json:"ranks"`
	Stages       int              `json:"stages"`
	Schedule     string           `json:"schedule"`
	Micro        int              `json:"microbatches"`
	Balanced     bool             `json:"balanced"` // the cut was chosen by the min-max partition, not marks
	Bubble       float64          `json:"bubble_textbook"`
	BubbleText   string           `json:"bubble_formula"`
	StageReports []StageReport    `json:"stage_reports"`
	Transfers    []TransferReport `json:"transfers"`
	Actions      [][]string       `json:"actions"` // per pipeline rank: its actions and the communication lowering inserted
	Notes        []string         `json:"notes"`
}

// StageReport is one stage: its rank, the body units it holds, its
// modelled time per micro-batch and its rank's bytes.
type StageReport struct {
	Stage     int      `json:"stage"`
	Rank      int      `json:"rank"`
	Units     []string `json:"units"` // where each unit starts
	TimeUs    float64  `json:"time_per_microbatch_us"`
	Params    int64    `json:"param_bytes"`
	PeakBytes int64    `json:"rank_peak_bytes"`
}

// TransferReport is one value sent between pipeline ranks, per step.
type TransferReport struct {
	Value  string `json:"value"`
	Kind   string `json:"kind"` // activation, gradient, parameter, step
	From   int    `json:"from_rank"`
	To     int    `json:"to_rank"`
	Micro  int    `json:"micro"` // -1: once per step
	Bytes  int64  `json:"bytes_per_device"`
	Where  string `json:"where"`
	Source string `json:"source"`
}

func explainPipeline(p *Plan) *PipelineReport {
	pp := p.Pipe
	s := pp.Schedule
	g := p.Graph
	r := &PipelineReport{Axis: g.Pipeline.Full.Axes[pp.Axis].Name, Ranks: s.Ranks, Stages: s.Stages, Schedule: s.Name,
		Micro: s.Micro, Balanced: pp.Stages.Auto, Transfers: []TransferReport{}, Notes: []string{}}
	if f, text, ok := pipeline.Formula(s.Name, s.Ranks, s.Micro, s.Stages/s.Ranks); ok {
		r.Bubble, r.BubbleText = f, text
	}
	var params []*ir.Value // once, not a walk over every value per stage
	for _, v := range p.Values {
		if v.Op == "param" {
			params = append(params, v)
		}
	}
	for st := range s.Stages {
		sr := StageReport{Stage: st, Rank: s.StageRank[st], TimeUs: pp.StageTime[st] * 1e6, Units: []string{}}
		for u, us := range pp.Stages.UnitStage {
			if us == st {
				sr.Units = append(sr.Units, ir.FormatPos(g.Train.Pipe.UnitPos[u]))
			}
		}
		for _, v := range params {
			if pp.Stages.Stage(v) == st {
				sr.Params += int64(sbp.Layout(p.Mesh, v.Type.Shape, p.Placement[v], 0).Numel() * v.Type.DType.Size())
			}
		}
		sr.PeakBytes = p.Peak[p.Exec.Mesh.Device(pipeCoord(p, sr.Rank))]
		r.StageReports = append(r.StageReports, sr)
	}
	lines := newSourceLines(g.Sources)
	for _, t := range pp.Transfers {
		src := lines.line(t.Pos.Filename, t.Pos.Line)
		r.Transfers = append(r.Transfers, TransferReport{Value: t.Label, Kind: t.Kind, From: t.From, To: t.To, Micro: t.Micro,
			Bytes: t.Bytes, Where: t.Where, Source: src})
	}
	kinds := map[int]string{}
	for _, t := range pp.Transfers {
		kinds[t.Tag] = t.Kind
	}
	for rank, prog := range p.Exec.Programs {
		r.Actions = append(r.Actions, actionsOf(prog, rank, kinds))
	}
	if n := zeroPipelineNote(p, s.Micro); n != "" {
		r.Notes = append(r.Notes, n)
	}
	if n := offloadPipelineNote(p, s.Micro); n != "" {
		r.Notes = append(r.Notes, n)
	}
	var shared []string
	var sharedBytes int64
	for _, t := range pp.Transfers {
		if t.Kind == "parameter" {
			if !slices.Contains(shared, t.Label) {
				shared = append(shared, t.Label)
			}
			sharedBytes += t.Bytes
		}
	}
	if len(shared) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("params read by several stages (%s) live on their first stage and are sent to the others every step (%s per device), and their gradient contributions come back; a stacked param read as index(W, l) is not split along the pipeline axis: give each layer its own params to keep them on their stage",
			strings.Join(shared, ", "), HumanBytes(float64(sharedBytes))))
	}
	if g.Train.Clip > 0 || g.Train.FoundInf != nil {
		r.Notes = append(r.Notes, "the global gradient norm (clip) and the f16 overflow flag are reduced across stages after every rank's last action: each rank's optimizer step waits for the slowest stage (measure with meshrun trace)")
	}
	return r
}

// pipeCoord is the full-mesh coordinate of a pipeline rank's first device.
func pipeCoord(p *Plan, rank int) []int {
	c := make([]int, p.Exec.Mesh.NumAxes())
	c[p.Pipe.Axis] = rank
	return c
}

// pipelineText renders the pipeline report.
func (r *PipelineReport) text(b textSink) {
	fmt.Fprintf(b, "\npipeline over %s: %d ranks, %d stages, schedule %s, %d micro-batches", r.Axis, r.Ranks, r.Stages, r.Schedule, r.Micro)
	if r.BubbleText != "" {
		fmt.Fprintf(b, "; bubble with uniform stages %s = %.1f%% (measure it: meshrun trace)", r.BubbleText, 100*r.Bubble)
	}
	how := "by the stage = marks"
	if r.Balanced {
		how = "balanced: the cut minimising the slowest stage under the cost model"
	}
	fmt.Fprintf(b, "\n  stages (%s)\n", how)
	tw := newTable("stage", "rank", "units start at", "modelled time / micro-batch", "params / device", "rank's peak")
	for _, s := range r.StageReports {
		tw.row(fmt.Sprint(s.Stage), fmt.Sprint(s.Rank), strings.Join(shortAll(s.Units), " "), fmt.Sprintf("%.3g us", s.TimeUs),
			HumanBytes(float64(s.Params)), HumanBytes(float64(s.PeakBytes)))
	}
	tw.writeTo(b)
	b.WriteString("  schedule (per rank: stage, F forward / B backward / I input-gradient / W weight-gradient, SEND_/RECV_ of activations (F) and gradients (B), micro-batch)\n")
	for rank, acts := range r.Actions {
		fmt.Fprintf(b, "    rank %d: %s\n", rank, strings.Join(acts, " "))
	}
	b.WriteString("  point-to-point traffic between stages (per step)\n")
	if len(r.Transfers) == 0 {
		b.WriteString("    none\n")
	} else {
		tw := newTable("value", "kind", "ranks", "micro-batches", "bytes/device each", "at")
		type key struct { // a value of each micro-batch is one row
			kind, where string
			from, to    int
		}
		count := map[key]int{}
		var order []key
		bytes := map[key]int64{}
		src, value := map[key]string{}, map[key]string{}
		for _, t := range r.Transfers {
			k := key{t.Kind, t.Where, t.From, t.To}
			if count[k] == 0 {
				order = append(order, k)
				value[k] = t.Value
			}
			count[k]++
			bytes[k], src[k] = t.Bytes, t.Source
		}
		sort.SliceStable(order, func(i, j int) bool { return order[i].from < order[j].from })
		for _, k := range order {
			tw.row(value[k], k.kind, fmt.Sprintf("%d → %d", k.from, k.to), fmt.Sprint(count[k]), HumanBytes(float64(bytes[k])),
				dropDirs(k.where)+": "+src[k])
		}
		tw.writeTo(b)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "  note: %s\n", n)
	}
}

func shortAll(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = shortWhere(w)
	}
	return out
}

// stageDevice maps a device of the plan's mesh to the device of the mesh
// placements are laid out on (without the pipeline axis), and says which
// values it holds (on a pipeline: its stages' and those of no stage).
func stageDevice(p *Plan, d int) (int, func(*ir.Value) bool) {
	if p.Pipe == nil {
		return d, func(*ir.Value) bool { return true }
	}
	c := p.Exec.Mesh.Coord(d)
	rank := c[p.Pipe.Axis]
	sc := append(append([]int{}, c[:p.Pipe.Axis]...), c[p.Pipe.Axis+1:]...)
	return p.Mesh.Device(sc), func(v *ir.Value) bool {
		st := p.Pipe.Stages.Stage(v)
		return st < 0 || p.Pipe.Schedule.StageRank[st] == rank
	}
}

// dropDirs shortens every file:line:col in a position with its call chain
// to the file's base name.
func dropDirs(where string) string {
	parts := strings.Split(where, " ")
	for i, w := range parts {
		lead := strings.TrimLeft(w, "(")
		parts[i] = w[:len(w)-len(lead)] + shortWhere(lead)
	}
	return strings.Join(parts, " ")
}

// actionsOf is a pipeline rank's program as schedule actions with the
// communication lowering inserted: each action at its mark, a receive
// before the action that waits for it and a send after the action that
// made it (SEND_F/RECV_F for activations, SEND_B/RECV_B for gradients);
// other values (a parameter several stages read, the pieces of a global
// norm) are written SEND(value→rank), RECV(value←rank). kinds gives each
// tag's transfer kind.
func actionsOf(prog *plan.Program, rank int, kinds map[int]string) []string {
	out := []string{}
	add := func(tok string) {
		if len(out) == 0 || out[len(out)-1] != tok {
			out = append(out, tok)
		}
	}
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		switch {
		case in.Kind == plan.Mark:
			add(in.Act.String())
		case in.Kind != plan.Send && in.Kind != plan.Recv:
		case kinds[in.Tag] != "activation" && kinds[in.Tag] != "gradient" && in.Kind == plan.Send:
			add(fmt.Sprintf("SEND(%s→%d)", in.Label, rank+in.Peer.Shift[0]))
		case kinds[in.Tag] != "activation" && kinds[in.Tag] != "gradient":
			add(fmt.Sprintf("RECV(%s←%d)", in.Label, rank+in.Peer.Shift[0]))
		default:
			dir := "F"
			if kinds[in.Tag] == "gradient" {
				dir = "B"
			}
			kind := pipeline.Kind(0)
			if in.Kind == plan.Send {
				kind = map[string]pipeline.Kind{"F": pipeline.SendF, "B": pipeline.SendB}[dir]
			} else {
				kind = map[string]pipeline.Kind{"F": pipeline.RecvF, "B": pipeline.RecvB}[dir]
			}
			add(pipeline.Action{Stage: in.Act.Stage, Micro: in.Act.Micro, Kind: kind, Peer: -1}.String())
		}
	}
	return out
}
