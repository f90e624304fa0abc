package lower

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// The blocks view (`explain --blocks`, the REPL's :blocks) steps through
// the local functions of a lowered plan and says which block each device
// holds and which blocks move. It runs the plan's local values
// symbolically, device by device (explain_blocks_expr.go): an argument
// arrives as the block sbp.Layout gives the device for its declared
// placement, and each op and collective transforms the names as it would
// transform the data — broadcast gives every member the root's block,
// all_gather concatenates, shift gives the peer's, reduce_scatter,
// all_reduce and reduce sum, a matmul multiplies. The bytes each device
// sends are those of the runtime's algorithms (rings, binomial trees,
// pairwise all-to-all). A call's collectives are grouped in steps: the
// collectives issued together and the computation on what they brought.

// BlocksReport is the view of every local function call, forward calls
// first, then the backward ones when the program trains.
type BlocksReport struct {
	Mesh  string      `json:"mesh"`
	Axes  []string    `json:"axes"`
	Sizes []int       `json:"sizes"`
	Calls []BlockCall `json:"calls"`
}

// BlockCall is one call of a local function (or its backward).
type BlockCall struct {
	Function string       `json:"function"`
	Where    string       `json:"where"`
	Source   string       `json:"source"`
	Backward bool         `json:"backward"`
	Inputs   []BlockValue `json:"inputs"`
	Steps    []BlockStep  `json:"steps"`
	Results  []BlockValue `json:"results"`
}

// BlockValue is a value's label on every device (Devices[d] for device d);
// for a result, Blocks[d] is the block of the global value device d holds.
type BlockValue struct {
	Name      string   `json:"name"`
	Placement string   `json:"placement,omitempty"`
	Blocks    []string `json:"blocks,omitempty"`
	Devices   []string `json:"devices"`
}

// BlockStep is the collectives issued together, then the named values
// the body computed from what they brought.
type BlockStep struct {
	Moves    []BlockMove  `json:"moves"`
	Computed []BlockValue `json:"computed,omitempty"`
}

// BlockMove is one written collective: what each device held before and
// after it, and the bytes it sent.
type BlockMove struct {
	Op      string        `json:"op"`
	Value   string        `json:"value"`
	Group   string        `json:"group"`
	Where   string        `json:"where"`
	Source  string        `json:"source"`
	Devices []BlockDevice `json:"devices"`
}

type BlockDevice struct {
	Before string `json:"before"`
	After  string `json:"after"`
	Bytes  int64  `json:"bytes_sent"`
}

// Blocks builds the blocks view of a lowered plan; it is empty when the
// program calls no local function.
func Blocks(p *Plan) *BlocksReport {
	m := p.Mesh
	r := &BlocksReport{Mesh: m.String()}
	for _, a := range m.Axes {
		r.Axes = append(r.Axes, a.Name)
		r.Sizes = append(r.Sizes, a.Size)
	}
	t := &tracker{m: m, lines: newSourceLines(p.Graph.Sources), labels: map[*ir.Value][]*expr{}, results: map[*ir.Value]*ir.Value{}}
	var fwd, bwd []BlockCall
	for _, call := range localCalls(p.Values) {
		c := t.call(call)
		if c.Backward {
			bwd = append(bwd, c)
		} else {
			fwd = append(fwd, c)
		}
	}
	r.Calls = append(fwd, bwd...)
	return r
}

// localCalls cuts the plan's values into calls: maximal runs of local
// values (to_local … from_local); a to_local after a from_local starts
// the next call.
func localCalls(vs []*ir.Value) [][]*ir.Value {
	var out [][]*ir.Value
	var cur []*ir.Value
	ended := false
	for _, v := range vs {
		if !isLocalOp(v) {
			if v.Op == "const" {
				continue // a number a body uses: the same on every device
			}
			if cur != nil {
				out, cur = append(out, cur), nil
			}
			continue
		}
		if v.Op == "to_local" && ended && cur != nil {
			out, cur = append(out, cur), nil
		}
		ended = v.Op == "from_local"
		cur = append(cur, v)
	}
	if cur != nil {
		out = append(out, cur)
	}
	return mergeBackward(out)
}

// mergeBackward joins the pieces of one call's backward that global
// values (a gradient's accumulation) came between: a backward run that
// no gradient enters (no to_local) continues the one before it when both
// belong to the same call site.
func mergeBackward(runs [][]*ir.Value) [][]*ir.Value {
	var out [][]*ir.Value
	for _, r := range runs {
		if n := len(out); n > 0 && r[0].Backward && out[n-1][0].Backward && !hasToLocal(r) {
			a, b := callSite(out[n-1]), callSite(r)
			if a != "" && a == b {
				out[n-1] = append(out[n-1], r...)
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

func hasToLocal(r []*ir.Value) bool {
	return slices.ContainsFunc(r, func(v *ir.Value) bool { return v.Op == "to_local" })
}

// callSite is where a run's call is, with the calls around it ("" when
// the run has neither a to_local nor a from_local).
func callSite(r []*ir.Value) string {
	for _, v := range r {
		if v.Op == "to_local" || v.Op == "from_local" {
			return ir.FormatPos(v.Pos) + via(formatAll(v.Calls))
		}
	}
	return ""
}

type tracker struct {
	m      *mesh.Mesh
	lines  *sourceLines
	labels map[*ir.Value][]*expr
	// results maps a body's returned value to its call's from_local, so
	// the gradient entering the call's backward is named after it (dY)
	results map[*ir.Value]*ir.Value
}

// call runs one call's values and groups its collectives in steps.
func (t *tracker) call(vs []*ir.Value) BlockCall {
	first := vs[0]
	c := BlockCall{Where: ir.FormatPos(first.Pos), Source: t.lines.line(first.Pos.Filename, first.Pos.Line)}
	c.Function = t.funcName(first)
	var step *BlockStep
	named := map[string]int{} // a name's index in step.Computed
	computed := false         // the body computed since the last collective
	for _, v := range vs {
		c.Backward = c.Backward || v.Backward
		t.eval(v)
		switch {
		case v.Op == "to_local":
			c.Inputs = append(c.Inputs, BlockValue{Name: t.argName(v), Placement: t.placeText(v.Attrs.Place), Devices: t.strings(v)})
		case v.Op == "from_local":
			c.Results = append(c.Results, t.result(v))
		case writtenCollective[v.Op]:
			if step == nil || computed {
				c.Steps = append(c.Steps, BlockStep{})
				step = &c.Steps[len(c.Steps)-1]
				named = map[string]int{}
			}
			computed = false
			step.Moves = append(step.Moves, t.move(v))
		case step != nil:
			computed = true
			if n := bodyName(v); n != "" {
				bv := BlockValue{Name: n, Devices: t.strings(v)}
				if i, ok := named[n]; ok {
					step.Computed[i] = bv
				} else {
					named[n] = len(step.Computed)
					step.Computed = append(step.Computed, bv)
				}
			}
		}
	}
	return c
}

// eval computes v's label on every device from its arguments'.
func (t *tracker) eval(v *ir.Value) {
	n := t.m.Size()
	out := make([]*expr, n)
	arg := func(i int) []*expr { return t.of(v.Args[i]) }
	rank := len(v.Type.Shape)
	for d := range n {
		switch v.Op {
		case "to_local":
			out[d] = t.block(v.Args[0], t.argName(v), v.Attrs.Place, d)
		case "from_local", "pvary", "equal_copies":
			out[d] = arg(0)[d]
		case "broadcast":
			out[d] = arg(0)[t.m.Group(d, v.Attrs.Axes[0])[v.Attrs.Root]]
		case "reduce":
			g := t.m.Group(d, v.Attrs.Axes[0])
			out[d] = zero
			if g[v.Attrs.Root] == d {
				out[d] = t.sumOver(arg(0), g)
			}
		case "all_reduce":
			out[d] = t.sumOver(arg(0), t.m.Group(d, v.Attrs.Axes...))
		case "all_gather":
			var parts []*expr
			for _, e := range t.m.Group(d, v.Attrs.Axes...) {
				parts = append(parts, arg(0)[e])
			}
			out[d] = cat(v.Attrs.Axis, parts)
		case "reduce_scatter":
			g := t.m.Group(d, v.Attrs.Axes...)
			k := indexOf(g, d)
			var terms []*expr
			for _, e := range g {
				terms = append(terms, piece(arg(0)[e], v.Attrs.Axis, rank, k, len(g)))
			}
			out[d] = sum(terms...)
		case "all_to_all":
			g := t.m.Group(d, v.Attrs.Axes[0])
			k := indexOf(g, d)
			var parts []*expr
			for _, e := range g {
				parts = append(parts, piece(arg(0)[e], v.Attrs.Axis, rank, k, len(g)))
			}
			out[d] = cat(v.Attrs.Dim2, parts)
		case "shift":
			out[d] = arg(0)[t.shiftPeer(v, d)]
		case "axis_index":
			out[d] = num(fmt.Sprint(t.m.Coord(d)[v.Attrs.Axes[0]]))
		default:
			out[d] = t.derive(v, d, rank)
		}
		if v.Op != "to_local" {
			out[d] = collapse(out[d], derivedName(v), t.coords(d))
		}
	}
	t.labels[v] = out
	if v.Op == "from_local" && !v.Backward {
		t.results[v.Args[0]] = v
	}
}

// argName names a call's argument: a gradient entering a backward is d
// and the name of the call's result.
func (t *tracker) argName(v *ir.Value) string {
	if f, ok := t.results[v.Primal]; ok && v.Backward {
		return "d" + t.globalName(f)
	}
	return t.globalName(v.Args[0])
}

// derive is the label of an ordinary op on labelled blocks.
func (t *tracker) derive(v *ir.Value, d, rank int) *expr {
	args := make([]*expr, len(v.Args))
	for i, a := range v.Args {
		args[i] = inner(t.of(a)[d])
	}
	if f, ok := fold(v.Op, args); ok {
		return f
	}
	switch v.Op {
	case "matmul":
		return prod(args[0], args[1])
	case "add":
		return sum(args[0], args[1])
	case "transpose":
		if swapsLastTwo(v.Attrs.Perm) {
			return transpose(args[0], rank)
		}
	case "mul":
		if args[0].kind == eZero || args[1].kind == eZero {
			return zero
		}
		return &expr{kind: eFn, text: "*", infix: true, args: args}
	case "sub", "div":
		sym := map[string]string{"sub": "−", "div": "/"}[v.Op]
		return &expr{kind: eFn, text: sym, infix: true, args: args}
	case "arange":
		return num(fmt.Sprintf("arange(%d)", v.Type.Shape[0]))
	}
	return &expr{kind: eFn, text: v.Op, args: args}
}

func swapsLastTwo(perm []int) bool {
	n := len(perm)
	if n < 2 || perm[n-1] != n-2 || perm[n-2] != n-1 {
		return false
	}
	for i := range n - 2 {
		if perm[i] != i {
			return false
		}
	}
	return true
}

// of is a value's labels; a global value a body uses directly (a scalar
// constant) is the same number on every device.
func (t *tracker) of(v *ir.Value) []*expr {
	if l, ok := t.labels[v]; ok {
		return l
	}
	e := &expr{kind: eNum, text: t.globalName(v)}
	if v.Op == "const" {
		e = num(fmt.Sprintf("%g", v.Attrs.Scalar))
	}
	l := make([]*expr, t.m.Size())
	for d := range l {
		l[d] = e
	}
	t.labels[v] = l
	return l
}

// block is the atom naming device d's block of global value g placed pl.
func (t *tracker) block(g *ir.Value, name string, pl sbp.NdSBP, d int) *expr {
	b := sbp.Layout(t.m, g.Type.Shape, pl, d)
	e := &expr{kind: eAtom, text: name, idx: make([][]int, len(b.Len)), nb: make([]int, len(b.Len))}
	for i, l := range b.Len {
		e.nb[i], e.idx[i] = 1, []int{0}
		if l > 0 {
			e.nb[i], e.idx[i] = g.Type.Shape[i]/l, []int{b.Off[i] / l}
		}
	}
	e.base = slices.Clone(e.nb)
	if len(b.Partial) > 0 {
		c := t.m.Coord(d)
		var parts []string
		for _, a := range b.Partial {
			parts = append(parts, fmt.Sprintf("%s=%d", t.m.Axes[a].Name, c[a]))
		}
		e.part = strings.Join(parts, ",")
	}
	return e
}

func (t *tracker) sumOver(l []*expr, g []int) *expr {
	terms := make([]*expr, len(g))
	for i, e := range g {
		terms[i] = l[e]
	}
	return sum(terms...)
}

// shiftPeer is the device whose block d receives: the one at d's
// coordinate minus the offsets, around the ring.
func (t *tracker) shiftPeer(v *ir.Value, d int) int {
	c := t.m.Coord(d)
	for i, a := range v.Attrs.Axes {
		s := t.m.Axes[a].Size
		c[a] = ((c[a]-v.Attrs.Shift[i])%s + s) % s
	}
	return t.m.Device(c)
}

func indexOf(g []int, d int) int {
	for i, e := range g {
		if e == d {
			return i
		}
	}
	return -1
}

func (t *tracker) strings(v *ir.Value) []string {
	l := t.labels[v]
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.String()
	}
	return out
}

// move is a collective's before and after on every device, and the bytes
// each sends.
func (t *tracker) move(v *ir.Value) BlockMove {
	name := bodyName(v)
	if name == "" {
		name = v.Label() // as explain's table of written collectives names it
	}
	mv := BlockMove{Op: v.Op, Value: name, Group: t.groupText(v),
		Where: ir.FormatPos(v.Pos) + via(formatAll(v.Calls)), Source: t.lines.line(v.Pos.Filename, v.Pos.Line)}
	before, after := t.strings(v.Args[0]), t.strings(v)
	for d := range t.m.Size() {
		mv.Devices = append(mv.Devices, BlockDevice{Before: before[d], After: after[d], Bytes: t.bytesSent(v, d)})
	}
	return mv
}

func (t *tracker) groupText(v *ir.Value) string {
	var names []string
	for _, a := range v.Attrs.Axes {
		names = append(names, t.m.Axes[a].Name)
	}
	g := "over " + strings.Join(names, "×")
	switch v.Op {
	case "broadcast", "reduce":
		return fmt.Sprintf("%s, root %s=%d", g, names[0], v.Attrs.Root)
	case "all_gather", "reduce_scatter":
		return fmt.Sprintf("%s, dim %d", g, v.Attrs.Axis)
	case "all_to_all":
		return fmt.Sprintf("%s, split dim %d, concat dim %d", g, v.Attrs.Axis, v.Attrs.Dim2)
	case "shift":
		var parts []string
		for i, n := range names {
			parts = append(parts, fmt.Sprintf("%s%+d", n, v.Attrs.Shift[i]))
		}
		return "along " + strings.Join(parts, ", ")
	}
	return g
}

// result is a from_local's blocks: device d's block of the global value
// and what it holds.
func (t *tracker) result(v *ir.Value) BlockValue {
	bv := BlockValue{Name: t.globalName(v), Placement: t.placeText(v.Attrs.Place), Devices: t.strings(v)}
	for d := range t.m.Size() {
		bv.Blocks = append(bv.Blocks, t.block(v, bv.Name, v.Attrs.Place, d).String())
	}
	return bv
}

// globalName names a global value in labels: its name; a gradient is d
// and its primal's name; a local function's unnamed result is the
// function's name.
func (t *tracker) globalName(v *ir.Value) string {
	switch {
	case v.Name != "":
		return strings.TrimPrefix(v.Name, "train.")
	case v.Primal != nil:
		return "d" + t.globalName(v.Primal)
	case v.Op == "from_local":
		return t.funcName(v)
	}
	return v.Label()
}

// funcName is the name of the local function called at v's position, as
// the source spells it there, without its module ("summa").
func (t *tracker) funcName(v *ir.Value) string {
	l := t.lines.raw(v.Pos.Filename, v.Pos.Line)
	col := v.Pos.Column - 1
	if col < 0 || col >= len(l) {
		return "local"
	}
	end := col
	for end < len(l) && (l[end] == '_' || l[end] == '.' || isAlnum(l[end])) {
		end++
	}
	name := l[col:end]
	if i := strings.LastIndex(name, "."); i >= 0 {
		name = name[i+1:]
	}
	if name == "" {
		return "local"
	}
	return name
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// bodyName is a body value's name without its function's prefix
// ("par.summa.acc" → "acc"), "" for a temporary.
func bodyName(v *ir.Value) string {
	if v.Name == "" {
		return ""
	}
	return v.Name[strings.LastIndex(v.Name, ".")+1:]
}

func derivedName(v *ir.Value) string {
	if n := bodyName(v); n != "" {
		return n
	}
	return v.Op
}

// raw is line n of file as written ("" if there is none).
func (s *sourceLines) raw(file string, n int) string {
	s.line(file, n) // splits the file once
	if lines := s.split[file]; n >= 1 && n <= len(lines) {
		return lines[n-1]
	}
	return ""
}

// coords is device d's coordinates, "@(1,0)", naming where an opaque
// label was computed.
func (t *tracker) coords(d int) string {
	c := strings.ReplaceAll(fmt.Sprint(t.m.Coord(d)), " ", ",")
	return "@(" + c[1:len(c)-1] + ")"
}

// fold computes an op on numbers (a loop's step arithmetic, a device's
// coordinate), so labels say 1, not (0 − 1) + 2.
func fold(op string, args []*expr) (*expr, bool) {
	x := make([]float64, len(args))
	for i, a := range args {
		switch a.kind {
		case eZero:
		case eNum:
			f, err := strconv.ParseFloat(a.text, 64)
			if err != nil {
				return nil, false
			}
			x[i] = f
		default:
			return nil, false
		}
	}
	var r float64
	switch {
	case op == "add" && len(x) == 2:
		r = x[0] + x[1]
	case op == "sub" && len(x) == 2:
		r = x[0] - x[1]
	case op == "mul" && len(x) == 2:
		r = x[0] * x[1]
	case op == "minimum" && len(x) == 2:
		r = math.Min(x[0], x[1])
	case op == "maximum" && len(x) == 2:
		r = math.Max(x[0], x[1])
	case op == "relu" && len(x) == 1:
		r = math.Max(x[0], 0)
	case op == "neg" && len(x) == 1:
		r = -x[0]
	default:
		return nil, false
	}
	return num(strconv.FormatFloat(r, 'g', -1, 64)), true
}

// placeText writes a placement with the mesh's axis names, as a local
// def declares it: {r: S(0), c: S(1)}.
func (t *tracker) placeText(pl sbp.NdSBP) string {
	parts := make([]string, len(pl))
	for a, x := range pl {
		parts[a] = t.m.Axes[a].Name + ": " + x.String()
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
