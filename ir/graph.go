package ir

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// Graph is a checked program: function calls inlined, every value typed,
// in an order where arguments come before their users. It is what Check
// produces and what lower consumes; the AST is never annotated.
type Graph struct {
	File    string
	Sources map[string][]byte // file name → text, for rendering errors
	Mesh    *mesh.Mesh
	MeshPos Pos
	Values  []*Value
	Outputs []*Output
	Train   *Train // nil unless the program has a train block
	// Pipeline is the mesh axis that carries stages (nil: none); Mesh is
	// then the declared mesh without it.
	Pipeline *Pipeline
}

// Value is one node: a source tensor, a constant or an op application.
type Value struct {
	ID    int
	Op    string // "input", "param", "const", or an op name such as "matmul"
	Args  []*Value
	Type  Type
	Attrs Attrs
	Name  string // the user's name for it, or "" for temporaries
	Pos   Pos    // where it is computed
	Calls []Pos  // call sites of the functions it was inlined through, innermost first

	// Backward marks values autodiff created.
	Backward bool
	// Primal is, for a gradient contribution, the forward value it is the
	// gradient of: inference prefers to place it dually (same splits).
	Primal *Value
	// Remat marks values computed inside a checkpointed function: the
	// backward recomputes them instead of keeping them alive.
	Remat bool

	// Declared is the placement the program fixes for this value: on
	// sources, and on to(x, {...}) conversions. Nil elsewhere.
	Declared sbp.NdSBP

	// Local marks a value of a local function's body: its Type is one
	// device's block, each device holds its own, and only explicit
	// collectives move data between them (see lang's local view).
	Local bool
	// Vary is, for a local value, the mesh axes along which the devices'
	// blocks may differ (bit a for axis a); along the others every device
	// holds the same block. Autodiff reads it to transpose collectives.
	Vary uint64
	// Equal is, of the axes in Vary, those along which the blocks are
	// nevertheless equal (an all_gather's or a broadcast's result): a
	// result may be declared B only along axes it does not vary on or is
	// equal along.
	Equal uint64
}

// Attrs are an op's static arguments.
type Attrs struct {
	Axis   int     // reductions, softmax, concat, slice; -1 = all dims
	Perm   []int   // transpose
	Start  int     // slice
	End    int     // slice
	Eps    float64 // layernorm
	Scalar float64 // const
	Init   *Init   // input, param, state, hyper
	// Regather marks a to() that all-gathers a ZeRO-3 parameter: the
	// backward gathers it again instead of keeping it alive.
	Regather bool

	// The local view's collectives: the mesh axes of their group, the
	// root of broadcast and reduce, a shift's offset per axis, the dim
	// all_to_all concatenates (Axis is the one it splits), and the
	// boundary placement of to_local and from_local.
	Axes  []int
	Root  int
	Shift []int
	Dim2  int
	Place sbp.NdSBP
}

// Init is how a source tensor gets its values.
type Init struct {
	Kind string  // "normal", "uniform", "zeros", "ones", "load"
	A, B float64 // mean/std or lo/hi
	Path string  // for load: resolved path
	Src  string  // for load: the path as written
}

// Output is an `output` statement.
type Output struct {
	Name      string
	Value     *Value
	Placement sbp.NdSBP // nil: keep the inferred placement
	Pos       Pos
}

// Label names a value for humans: its name, or op#id.
func (v *Value) Label() string {
	if v.Name != "" {
		return v.Name
	}
	return v.Op + "#" + strconv.Itoa(v.ID) // not fmt: called per value by every pass that names one
}

// HasLocal reports whether the graph holds local values (local
// functions' bodies): they are blocks of its mesh, not global tensors.
func (g *Graph) HasLocal() bool {
	for _, v := range g.Values {
		if v.Local {
			return true
		}
	}
	return false
}

// IsSource reports the values a step starts from: inputs, params,
// optimizer states and per-step scalars fed by the trainer ("hyper").
func (v *Value) IsSource() bool {
	return v.Op == "input" || v.Op == "param" || v.Op == "state" || v.Op == "hyper"
}

// Where renders the value's position and call chain: "mlp.mesh:9:9 (via mlp.mesh:13:5)".
func (v *Value) Where() string {
	if len(v.Calls) == 0 {
		return FormatPos(v.Pos)
	}
	// built in one buffer: the emitters ask once per value
	return string(v.AppendWhere(make([]byte, 0, 64*(1+len(v.Calls)))))
}

// AppendWhere appends Where's text to b: a caller that interns the
// strings (the micro-batches of a pipeline repeat each position) builds
// the key without allocating.
func (v *Value) AppendWhere(b []byte) []byte {
	b = AppendPos(b, v.Pos)
	if len(v.Calls) == 0 {
		return b
	}
	b = append(b, " (called from "...)
	for i, c := range v.Calls {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = AppendPos(b, c)
	}
	return append(b, ')')
}

// CollectiveAttrs renders a local-view collective's group, root and
// shift for dumps (" axes=[0] root=1"); "" for other values.
func (v *Value) CollectiveAttrs() string {
	if len(v.Attrs.Axes) == 0 {
		return ""
	}
	s := fmt.Sprintf(" axes=%v", v.Attrs.Axes)
	if v.Op == "broadcast" || v.Op == "reduce" {
		s += fmt.Sprintf(" root=%d", v.Attrs.Root)
	}
	if v.Attrs.Shift != nil {
		s += fmt.Sprintf(" shift=%v", v.Attrs.Shift)
	}
	return s
}

// Dump prints the graph, one value per line.
func (g *Graph) Dump() string {
	var b strings.Builder
	if g.Mesh != nil {
		fmt.Fprintf(&b, "mesh %s = %s\n", g.Mesh.Name, g.Mesh)
	}
	for _, v := range g.Values {
		var args []string
		for _, a := range v.Args {
			args = append(args, fmt.Sprintf("%%%d", a.ID))
		}
		fmt.Fprintf(&b, "%%%d = %s(%s) : %s", v.ID, v.Op, strings.Join(args, ", "), v.Type)
		if v.Name != "" {
			fmt.Fprintf(&b, " name=%s", v.Name)
		}
		if v.Declared != nil {
			fmt.Fprintf(&b, " declared=%s", v.Declared)
		}
		b.WriteString(v.CollectiveAttrs())
		b.WriteByte('\n')
	}
	for _, o := range g.Outputs {
		fmt.Fprintf(&b, "output %s = %%%d", o.Name, o.Value.ID)
		if o.Placement != nil {
			fmt.Fprintf(&b, " %s", o.Placement)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
