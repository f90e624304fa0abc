package lower

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// Report is what `meshrun explain` shows, as data (its JSON form is the
// --json output; spec.md documents the schema).
type Report struct {
	Mesh        MeshReport         `json:"mesh"`
	Ops         []OpReport         `json:"ops"`
	Collectives []CollectiveReport `json:"collectives"`
	// Written are the collectives local functions write (see
	// explain_local.go), in program order.
	Written  []CollectiveReport `json:"written,omitempty"`
	Outputs  []OutputReport     `json:"outputs"`
	Memory   []MemoryReport     `json:"memory"`
	Totals   TotalsReport       `json:"totals"`
	Pipeline *PipelineReport    `json:"pipeline,omitempty"`
	// Buckets are the collectives launched together (explain_bucket.go).
	Buckets []BucketReport `json:"buckets,omitempty"`
	// Notes warn where a combination multiplies communication.
	Notes []string `json:"notes,omitempty"`
	// training: the program has a train block (the text report then
	// splits memory into parameters, optimizer states, gradients).
	training bool
	// bucketCap is the bucket pass's cap of bytes per device
	bucketCap int64
}

type MeshReport struct {
	Name    string       `json:"name"`
	Devices int          `json:"devices"`
	Axes    []AxisReport `json:"axes"`
}

type AxisReport struct {
	Name       string  `json:"name"`
	Size       int     `json:"size"`
	AlphaUs    float64 `json:"alpha_us"`
	GBPerSec   float64 `json:"bandwidth_gb_s"`
	ReduceGBps float64 `json:"reduce_gb_s"`
}

type ArgReport struct {
	Value     string `json:"value"`
	Placement string `json:"placement"`
	Converted string `json:"converted_to,omitempty"`
	Local     []int  `json:"local_shape"`
}

type OpReport struct {
	ID          int         `json:"id"`
	Op          string      `json:"op"`
	Value       string      `json:"value"`
	Where       string      `json:"where"`
	Line        int         `json:"line"`
	Shape       []int       `json:"shape"`
	DType       string      `json:"dtype"`
	Inputs      []ArgReport `json:"inputs"`
	Placement   string      `json:"placement"`
	Local       []int       `json:"local_shape"`
	LocalShapes [][]int     `json:"local_shapes_distinct"`
	CalledFrom  []string    `json:"called_from,omitempty"`
	Why         []string    `json:"why,omitempty"`
	Candidates  int         `json:"candidates"`
}

type CollectiveReport struct {
	Index       int      `json:"index"`
	Kind        string   `json:"kind"`
	Axis        string   `json:"axis"`
	GroupSize   int      `json:"group_size"`
	Value       string   `json:"value"`
	From        string   `json:"from"`
	To          string   `json:"to"`
	Communicate bool     `json:"communicates"`
	Bytes       float64  `json:"bytes_per_device"`
	TimeUs      float64  `json:"time_us"`
	Formula     string   `json:"formula"`
	Cause       string   `json:"cause"`
	Where       string   `json:"where"`
	Line        int      `json:"line"`
	CalledFrom  []string `json:"called_from,omitempty"`
	Source      string   `json:"source"`
}

type OutputReport struct {
	Name      string `json:"name"`
	Placement string `json:"placement"`
	Shape     []int  `json:"shape"`
}

type MemoryReport struct {
	Device    int    `json:"device"`
	Coord     string `json:"coord"`
	PeakBytes int64  `json:"peak_bytes"`
	// Training programs: what the device holds between steps (parameters
	// and optimizer states), the reduced gradients of a step, and the
	// rest of its peak (activations and other transient values).
	ParamBytes      int64 `json:"param_bytes"`
	OptimizerBytes  int64 `json:"optimizer_bytes"`
	GradientBytes   int64 `json:"gradient_bytes"`
	ActivationBytes int64 `json:"activation_bytes"`
	// Host is, under offload, the device's host tier (explain_tier.go);
	// the fields above are then its device memory alone.
	Host *HostMemoryReport `json:"host,omitempty"`
}

type TotalsReport struct {
	Collectives  int            `json:"collectives"`
	LocalSteps   int            `json:"local_steps"`
	Bytes        float64        `json:"bytes_per_device"`
	TimeUs       float64        `json:"time_us"`
	MaxPeakBytes int64          `json:"max_peak_bytes"`
	ByKind       map[string]int `json:"by_kind"`
	// AdamUpdates counts the Adam updates of every program, AdamFused
	// those the fuseadam pass made one instruction, and Donating the
	// instructions that write a result over a dying argument's buffer
	// (plan.Instr.Donate: fused updates writing p', m', v' over p, m, v).
	AdamUpdates int `json:"adam_updates,omitempty"`
	AdamFused   int `json:"adam_fused,omitempty"`
	Donating    int `json:"donating,omitempty"`
}

// Formula is the cost formula of a collective on one axis (algorithms.md).
func Formula(k sbp.Collective) string {
	switch k {
	case sbp.AllGather:
		return "(p-1)/p·G bytes, (p-1)α + (p-1)/p·G·β"
	case sbp.ReduceScatter:
		return "(p-1)/p·G bytes, (p-1)α + (p-1)/p·G·(β+γ)"
	case sbp.AllReduce:
		return "2(p-1)/p·G bytes, 2(p-1)α + 2(p-1)/p·G·β + (p-1)/p·G·γ"
	case sbp.AllToAll:
		return "(p-1)/p·L bytes, (p-1)α + (p-1)/p·L·β"
	case sbp.RootBroadcast:
		return "⌈lg p⌉·L bytes (the root), ⌈lg p⌉(α + L·β)"
	case sbp.RootReduce:
		return "L bytes (every member but the root), ⌈lg p⌉(α + L·(β+γ))"
	case "shift":
		return "L bytes, α + L·β"
	}
	return "local, no communication"
}

// Explain builds the report of a lowered plan.
func Explain(p *Plan) *Report {
	m := p.Mesh
	r := &Report{Mesh: MeshReport{Name: m.Name, Devices: m.Size()}, Totals: TotalsReport{ByKind: map[string]int{}}, training: p.Graph.Train != nil}
	for i, a := range m.Axes {
		l := p.Planner.Topo.Link(i)
		r.Mesh.Axes = append(r.Mesh.Axes, AxisReport{Name: a.Name, Size: a.Size, AlphaUs: round6(l.Alpha * 1e6), GBPerSec: round6(1 / l.Beta / 1e9), ReduceGBps: round6(1 / l.Gamma / 1e9)})
	}
	// the ops' rows are independent of each other and of the rest: their
	// parts are made in parallel with it, each with its own memos
	r.Ops = make([]OpReport, len(p.Values))
	ps := parts(len(p.Values), opsPerPart)
	opsDone := inBackground(len(ps), func(i int) {
		explainOps(p, r.Ops[ps[i][0]:ps[i][1]], p.Values[ps[i][0]:ps[i][1]])
	})
	memo := newReportMemo(len(p.Graph.Values))
	lines := newSourceLines(p.Graph.Sources)
	steps := 0
	for _, c := range p.Convs {
		steps += len(c.Path.Steps)
	}
	if steps > 0 { // nil without any: the JSON says null, as before
		r.Collectives = make([]CollectiveReport, 0, steps) // one allocation, not one per doubling
	}
	uneven := map[string]float64{} // stepBytes's memory
	for _, c := range p.Convs {
		for _, st := range c.Path.Steps {
			cr := CollectiveReport{Index: len(r.Collectives) + 1, Kind: string(st.Kind), Axis: m.Axes[st.Axis].Name, GroupSize: m.Axes[st.Axis].Size,
				Value: memo.label(c.Value), From: memo.placement(st.From), To: memo.placement(st.To), Communicate: st.Kind.Communicates(),
				Bytes: stepBytes(m, c.Value, st, uneven), TimeUs: st.Time * 1e6, Formula: Formula(st.Kind), Cause: c.Cause, Where: memo.where(c.Pos), Line: c.Pos.Line, CalledFrom: memo.callSites(c.Calls),
				Source: lines.line(c.Pos.Filename, c.Pos.Line)}
			r.Collectives = append(r.Collectives, cr)
			if cr.Communicate {
				r.Totals.Collectives++
			} else {
				r.Totals.LocalSteps++
			}
			r.Totals.ByKind[cr.Kind]++
			r.Totals.Bytes += cr.Bytes
			r.Totals.TimeUs += st.Time * 1e6
		}
	}
	explainWritten(p, r, lines)
	explainBuckets(p, r)
	r.bucketCap = p.bucketCap()
	for _, o := range p.Outputs {
		r.Outputs = append(r.Outputs, OutputReport{Name: o.Output.Name, Placement: o.Placement.String(), Shape: o.Output.Value.Type.Shape})
	}
	held := heldByDevice(p)
	for d, peak := range p.Peak {
		h := held(d)
		mr := MemoryReport{Device: d, Coord: p.Exec.Mesh.CoordString(d), PeakBytes: peak,
			ParamBytes: h.param, OptimizerBytes: h.optimizer, GradientBytes: h.gradient}
		mr.ActivationBytes = peak - mr.ParamBytes - mr.OptimizerBytes
		mr.Host = hostMemory(p, d, h)
		r.Memory = append(r.Memory, mr)
		r.Totals.MaxPeakBytes = max(r.Totals.MaxPeakBytes, peak)
	}
	r.Totals.AdamUpdates, r.Totals.AdamFused, r.Totals.Donating = adamCounts(p)
	opsDone()
	r.Notes = explainNotes(p, r)
	if p.Pipe != nil {
		r.Pipeline = explainPipeline(p)
		full := p.Exec.Mesh
		r.Mesh.Devices = full.Size()
		a := full.Axes[p.Pipe.Axis]
		l := mesh.DefaultLink // sends between stages are modelled on the default link
		axis := AxisReport{Name: a.Name, Size: a.Size, AlphaUs: round6(l.Alpha * 1e6), GBPerSec: round6(1 / l.Beta / 1e9), ReduceGBps: round6(1 / l.Gamma / 1e9)}
		r.Mesh.Axes = append(r.Mesh.Axes[:p.Pipe.Axis], append([]AxisReport{axis}, r.Mesh.Axes[p.Pipe.Axis:]...)...)
	}
	return r
}

// opsPerPart is the fewest ops explain gives a goroutine of their own.
var opsPerPart = 16384 // a variable: tests cut small programs into parts

// parts cuts [0, n) into at most GOMAXPROCS ranges of at least least
// items each (one range when n is smaller), as [start, end) pairs.
func parts(n, least int) [][2]int {
	k := max(1, min(runtime.GOMAXPROCS(0), n/least))
	out := make([][2]int, k)
	for i := range out {
		out[i] = [2]int{i * n / k, (i + 1) * n / k}
	}
	return out
}

// explainOps fills ops with the rows of vals (p.Values from some index
// on): its own memos, so that parts of the list can be made in parallel.
func explainOps(p *Plan, ops []OpReport, vals []*ir.Value) {
	blocks := &blockMemo{p: p, local: map[string][]int{}, distinct: map[string][][]int{}}
	memo := newReportMemo(len(p.Graph.Values))
	dtypes := map[ir.DType]string{}
	var inputs window[ArgReport]
	for k, v := range vals {
		pl := p.placementOf(v)
		dt, ok := dtypes[v.Type.DType]
		if !ok {
			dt = v.Type.DType.String()
			dtypes[v.Type.DType] = dt
		}
		ops[k] = OpReport{ID: v.ID, Op: v.Op, Value: memo.label(v), Where: memo.where(v.Pos), Line: v.Pos.Line, CalledFrom: memo.callSites(v.Calls), Shape: v.Type.Shape, DType: dt,
			Placement: memo.placedAs(v, pl), Local: blocks.localShape(v.Type.Shape, pl), LocalShapes: blocks.distinctShapes(v.Type.Shape, pl)}
		op := &ops[k]
		ch := p.choiceOf(v)
		if ch == nil {
			continue
		}
		op.Candidates = ch.Candidates
		if v.Op != "to" {
			op.Why = memo.dedupe(ch.Sig.Why)
		}
		if len(v.Args) > 0 {
			op.Inputs = inputs.take(len(v.Args))
		}
		for i, a := range v.Args {
			ar := ArgReport{Value: memo.label(a), Placement: memo.placedOf(p, a), Local: blocks.localShape(a.Type.Shape, ch.Sig.In[i])}
			if ch.ArgConv[i] != nil {
				ar.Converted = memo.placement(ch.Sig.In[i])
			}
			op.Inputs[i] = ar
		}
	}
}

// round6 drops float noise from unit conversions (50.00000000000001 → 50).
func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func callSites(v *ir.Value) []string { return formatAll(v.Calls) }

func formatAll(ps []ir.Pos) []string {
	var out []string
	for _, c := range ps {
		out = append(out, ir.FormatPos(c))
	}
	return out
}

// via renders a call chain as " ← 34:5 ← 12:1" (line:col in the caller's file).
func via(calls []string) string {
	s := ""
	for _, c := range calls {
		if i := strings.LastIndex(c, ".mesh:"); i >= 0 {
			c = c[i+6:]
		}
		s += " ← " + c
	}
	return s
}

// distinctShapes lists the local shapes a value's blocks take, in the
// order of the first device holding each. Only the coordinates on the axes
// sbp.MarkVarying marks change a block, so it walks those axes' coordinates
// alone, the others at 0: the devices it visits are, in the same order,
// the first of each set of devices with equal blocks, which keeps the
// order of a walk over every device at a fraction of the cost.
func distinctShapes(p *Plan, shape []int, pl sbp.NdSBP) [][]int {
	m := p.Mesh
	varying := make([]bool, len(m.Axes))
	sbp.MarkVarying(m, shape, pl, varying)
	seen := map[string]bool{}
	var out [][]int
	coord := make([]int, len(m.Axes))
	for {
		s := sbp.LocalShape(m, shape, pl, m.Device(coord))
		if k := fmt.Sprint(s); !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
		if !nextCoord(m, coord, varying) {
			return out
		}
	}
}

// blockMemo answers device 0's block shape and distinctShapes once per
// distinct (shape, placement): a deep or pipelined model repeats each
// layer's values with the same ones. The reports share the answers, which
// nothing modifies.
type blockMemo struct {
	p        *Plan
	key      []byte
	local    map[string][]int
	distinct map[string][][]int
}

func (bm *blockMemo) setKey(shape []int, pl sbp.NdSBP) {
	bm.key = binary.AppendUvarint(bm.key[:0], uint64(len(shape)))
	for _, d := range shape {
		bm.key = binary.AppendVarint(bm.key, int64(d))
	}
	bm.key = binary.AppendUvarint(bm.key, uint64(len(pl)))
	for _, e := range pl {
		bm.key = append(bm.key, byte(e.Kind), byte(e.Reduce))
		bm.key = binary.AppendVarint(bm.key, int64(e.Dim))
	}
}

func (bm *blockMemo) localShape(shape []int, pl sbp.NdSBP) []int {
	bm.setKey(shape, pl)
	if s, ok := bm.local[string(bm.key)]; ok {
		return s
	}
	s := sbp.LocalShape(bm.p.Mesh, shape, pl, 0)
	bm.local[string(bm.key)] = s
	return s
}

func (bm *blockMemo) distinctShapes(shape []int, pl sbp.NdSBP) [][]int {
	bm.setKey(shape, pl)
	if s, ok := bm.distinct[string(bm.key)]; ok {
		return s
	}
	s := distinctShapes(bm.p, shape, pl)
	bm.distinct[string(bm.key)] = s
	return s
}

// nextCoord advances coord to the next coordinate in row-major order over
// the marked axes; false after the last.
func nextCoord(m *mesh.Mesh, coord []int, marked []bool) bool {
	for a := len(coord) - 1; a >= 0; a-- {
		if !marked[a] {
			continue
		}
		if coord[a]++; coord[a] < m.Axes[a].Size {
			return true
		}
		coord[a] = 0
	}
	return false
}

// heldBytes is what a device holds of the parameters, the optimizer
// state and the gradients.
// heldBytes is what a device holds of the parameters, optimizer states
// and gradients, in device memory and (offload) in host memory.
type heldBytes struct {
	param, optimizer, gradient             int64
	hostParam, hostOptimizer, hostGradient int64
}

// heldByDevice returns the bytes each device holds of the parameters,
// optimizer state and gradients. When all of them are split evenly
// (sbp.Uniform) a device's bytes depend only on which values it holds,
// i.e. on its pipeline rank, so they are summed once per pipeline rank
// rather than once per device of the mesh.
func heldByDevice(p *Plan) func(d int) heldBytes {
	uniform := true
	for _, v := range heldValues(p) {
		uniform = uniform && sbp.Uniform(p.Mesh, v.Type.Shape, p.Placement[v])
	}
	perRank := map[int]heldBytes{}
	return func(d int) heldBytes {
		rank := 0
		if p.Pipe != nil {
			rank = p.Exec.Mesh.Coord(d)[p.Pipe.Axis]
		}
		if h, ok := perRank[rank]; ok && uniform {
			return h
		}
		h := sumHeld(p, d)
		perRank[rank] = h
		return h
	}
}

// heldValues are the values heldBytes counts.
func heldValues(p *Plan) []*ir.Value {
	var vs []*ir.Value
	for _, v := range p.Values {
		if v.Op == "param" || v.Op == "state" {
			vs = append(vs, v)
		}
	}
	if t := p.Graph.Train; t != nil {
		for _, g := range t.Grads {
			vs = append(vs, g)
		}
	}
	return append(vs, offloadedGrads(p)...)
}

// sumHeld adds up device d's blocks of the parameters, optimizer state
// and gradients that its pipeline stage holds.
func sumHeld(p *Plan, d int) heldBytes {
	sd, holds := stageDevice(p, d)
	local := func(v *ir.Value) int64 {
		if !holds(v) {
			return 0
		}
		return int64(sbp.Layout(p.Mesh, v.Type.Shape, p.Placement[v], sd).Numel() * v.Type.DType.Size())
	}
	var h heldBytes
	for _, v := range p.Values {
		switch {
		case v.Op == "param" && p.Host[v]:
			h.hostParam += local(v)
		case v.Op == "param":
			h.param += local(v)
		case v.Op == "state" && p.Host[v]:
			h.hostOptimizer += local(v)
		case v.Op == "state":
			h.optimizer += local(v)
		}
	}
	if t := p.Graph.Train; t != nil && p.Host == nil {
		for _, g := range t.Grads {
			h.gradient += local(g)
		}
	}
	if p.Host != nil {
		h.gradient, h.hostGradient = offloadGradBytes(p, local)
	}
	return h
}

func dedupe(ss []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// sourceLines quotes lines of the program's files, splitting each file
// once: explain quotes the line of every collective and transfer, tens of
// thousands for a deep pipelined model, and splitting the file for each
// made that quadratic in the program's length.
type sourceLines struct {
	src   map[string][]byte
	split map[string][]string
}

func newSourceLines(src map[string][]byte) *sourceLines {
	return &sourceLines{src: src, split: map[string][]string{}}
}

// line is line n of file without its comment or surrounding space ("" if
// there is no such line).
func (s *sourceLines) line(file string, n int) string {
	lines, ok := s.split[file]
	if !ok {
		lines = strings.Split(string(s.src[file]), "\n")
		s.split[file] = lines
	}
	if n < 1 || n > len(lines) {
		return ""
	}
	return stripComment(lines[n-1])
}

// stripComment is a line of code without its comment ('#' outside a
// string) and surrounding space.
func stripComment(l string) string {
	inStr := false
	for i, r := range l {
		switch {
		case r == '"':
			inStr = !inStr
		case r == '#' && !inStr:
			l = l[:i]
		}
		if len(l) <= i {
			break
		}
	}
	return strings.TrimSpace(l)
}

// HumanBytes renders 98304 as "96.0 KiB".
func HumanBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	// strconv, not fmt: explain renders one per collective step
	if i == 0 {
		return strconv.FormatFloat(b, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(b, 'f', 1, 64) + " " + units[i]
}

// Text renders the report for a terminal.
func (r *Report) Text() string {
	var b strings.Builder
	r.write(&b, b.Grow)
	return b.String()
}

// WriteText writes Text's text to w as it renders it (explain's text of a
// deep pipelined model is tens of megabytes: not built as one string).
func (r *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	r.write(bw, nil)
	return bw.Flush()
}

// textSink is what the text is written to: a strings.Builder or a
// bufio.Writer.
type textSink interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

// write renders the report into b; grow (when not nil) sizes b once the
// two large tables' size is known.
func (r *Report) write(b textSink, grow func(int)) {
	var axes []string
	for _, a := range r.Mesh.Axes {
		axes = append(axes, fmt.Sprintf("%s=%d", a.Name, a.Size))
	}
	fmt.Fprintf(b, "mesh %s = [%s]  (%d devices)\n", r.Mesh.Name, strings.Join(axes, ", "), r.Mesh.Devices)
	for _, a := range r.Mesh.Axes {
		fmt.Fprintf(b, "  link %-4s alpha %.1f us, %.0f GB/s\n", a.Name, a.AlphaUs, a.GBPerSec)
	}
	b.WriteString("\nops (placement per mesh axis; local shape on device 0)\n")
	// the rows of the two large tables are made, and measured, in
	// parallel: the ops table in parts, each with its own memo
	ps := parts(len(r.Ops), opsPerPart)
	opParts := make([]*table, len(ps))
	rowsDone := inBackground(len(ps), func(i int) { opParts[i] = opRows(r.Ops[ps[i][0]:ps[i][1]]) })
	tc := newTable("#", "kind", "axis", "value", "from → to", "bytes/device", "time", "caused by")
	for i := range r.Collectives {
		c := &r.Collectives[i] // not a copy of each row
		// strconv and concatenation, not fmt: a row per collective step,
		// tens of thousands for a deep pipelined model (the same text)
		tc.row(strconv.Itoa(c.Index), c.Kind, c.Axis, c.Value, c.From+" → "+c.To, HumanBytes(c.Bytes), strconv.FormatFloat(c.TimeUs, 'f', 2, 64)+" us",
			c.Cause+" at "+shortWhere(c.Where)+via(c.CalledFrom)+": "+c.Source)
	}
	tc.widths()
	rowsDone()
	tw := joinTables([]string{"where", "value", "op", "inputs", "output", "local"}, opParts)
	// the two tables are nearly all of the text: size it once
	if grow != nil {
		grow(tw.size() + tc.size() + 64<<10)
	}
	tw.writeTo(b)
	b.WriteString("\ncollectives inserted by the compiler\n")
	if len(r.Collectives) == 0 {
		b.WriteString("  none: every op found its inputs where it needed them\n")
	} else {
		tc.writeTo(b)
		kinds := map[string]bool{}
		b.WriteString("  formulas (p = group size, G = bytes the group holds, L = local bytes):\n")
		for i := range r.Collectives {
			c := &r.Collectives[i]
			if !kinds[c.Kind] {
				kinds[c.Kind] = true
				fmt.Fprintf(b, "    %-14s %s\n", c.Kind, c.Formula)
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "  note: %s\n", n)
	}
	writeWritten(b, r.Written)
	writeBuckets(b, r.Buckets, r.bucketCap)
	if r.training && len(r.Memory) > 0 {
		b.WriteString("\nmemory per device in a training step\n")
		tw := newTable("devices", "parameters", "optimizer states", "gradients (reduced)", "activations and other", "peak")
		seen := map[string][]int{}
		var order []string
		for _, m := range r.Memory {
			k := fmt.Sprint(m.ParamBytes, m.OptimizerBytes, m.GradientBytes, m.ActivationBytes, m.PeakBytes)
			if _, ok := seen[k]; !ok {
				order = append(order, k)
			}
			seen[k] = append(seen[k], m.Device)
		}
		for _, k := range order {
			m := r.Memory[seen[k][0]]
			tw.row(DeviceRanges(seen[k]), HumanBytes(float64(m.ParamBytes)), HumanBytes(float64(m.OptimizerBytes)),
				HumanBytes(float64(m.GradientBytes)), HumanBytes(float64(m.ActivationBytes)), HumanBytes(float64(m.PeakBytes)))
		}
		if r.Memory[0].Host != nil {
			tw = tieredMemoryTable(r.Memory)
			b.WriteString(offloadHeading)
		}
		tw.writeTo(b)
	}
	b.WriteString("\npeak memory per device (tensors held, from the plan)\n")
	groups := map[int64][]int{}
	var peaks []int64
	for _, m := range r.Memory {
		if _, ok := groups[m.PeakBytes]; !ok {
			peaks = append(peaks, m.PeakBytes)
		}
		groups[m.PeakBytes] = append(groups[m.PeakBytes], m.Device)
	}
	sort.Slice(peaks, func(i, j int) bool { return peaks[i] > peaks[j] })
	for _, pk := range peaks {
		fmt.Fprintf(b, "  %-10s devices %s\n", HumanBytes(float64(pk)), rangeList(groups[pk]))
	}
	if t := r.Totals; t.AdamUpdates > 0 {
		fmt.Fprintf(b, "  Adam updates fused into one pass: %d of %d; results written over dying arguments (buffer donation, no new block): %d\n", t.AdamFused, t.AdamUpdates, t.Donating)
	}
	if r.Pipeline != nil {
		r.Pipeline.text(b)
	}
	fmt.Fprintf(b, "\ntotals: %d collective steps (%d local), %s sent per device, %.2f us modelled, peak %s\n",
		r.Totals.Collectives, r.Totals.LocalSteps, HumanBytes(r.Totals.Bytes), r.Totals.TimeUs, HumanBytes(float64(r.Totals.MaxPeakBytes)))
}

// opRows is the ops table's rows of ops, measured, without the heading.
func opRows(ops []OpReport) *table {
	t := &table{rows: make([][]string, 0, len(ops))}
	memo := newTextMemo()
	var ins []byte
	for k := range ops {
		o := &ops[k]
		ins = appendInputs(ins[:0], o)
		local := memo.shape(o.Local)
		if len(o.LocalShapes) > 1 {
			local += fmt.Sprintf(" (+%d other shapes: uneven)", len(o.LocalShapes)-1)
		}
		t.row(memo.where(o.Where, o.CalledFrom), o.Value, o.Op, string(ins), o.Placement, local)
	}
	t.measure(6)
	return t
}

// shortWhere drops the directory of a file:line:col.
func shortWhere(w string) string {
	if i := strings.LastIndex(w, "/"); i >= 0 {
		return w[i+1:]
	}
	return w
}

// DeviceRanges renders devices [0 1 2 5] as "d0-2,d5".
func DeviceRanges(ds []int) string {
	return "d" + strings.ReplaceAll(rangeList(ds), ",", ",d")
}

func rangeList(ds []int) string {
	var parts []string
	for i := 0; i < len(ds); {
		j := i
		for j+1 < len(ds) && ds[j+1] == ds[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ds[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ds[i], ds[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
