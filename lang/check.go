package lang

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/ad"
	"github.com/meshrun/meshrun/internal/regular"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/stdlib"
)

// CheckOptions configure the checker.
type CheckOptions struct {
	// Devices is how many devices the run may use; a larger mesh is an
	// error. 0 means no limit.
	Devices int
	// Dir is the directory that load("...") paths are relative to.
	Dir string
	// AllowExprStmt accepts bare expressions as statements (the REPL).
	AllowExprStmt bool
	// Pipeline, if set, replaces the train block's pipeline schedule, e.g.
	// "interleaved(2)" (meshrun trace --schedules compares them); naive
	// then runs the whole batch as one micro-batch.
	Pipeline string
	// SingleDevice checks the program on a mesh of the same axes, each of
	// size 1: the single-device reference of a program whose local
	// functions are written per device (their blocks are then the whole
	// tensors and every collective moves nothing).
	SingleDevice bool
	// noMicroCopy checks every micro-batch of a train block instead of
	// copying the first (train_micro.go): the reference its tests compare
	// the copy with.
	noMicroCopy bool
	// maxWork, if set, replaces MaxWork (tests of the budget).
	maxWork int
}

// Checker turns statements into a typed Graph. It keeps its environment
// between calls so the REPL can feed it one statement at a time.
type Checker struct {
	opts CheckOptions
	g    *Graph
	b    *ir.Builder // appends to g
	// base is the number of values before the current REPL statement, and
	// saved the old contents of earlier values it changed (see touch).
	base    int
	saved   map[*Value]Value
	errs    ErrorList
	globals map[string]*Value
	funcs   map[string]*FuncDef
	modules map[string]map[string]*FuncDef
	// broken holds the names whose definition failed, and brokenMesh or
	// brokenUse+module when a mesh or use statement did: the error was
	// reported there, so their uses report nothing (as go/types does with
	// an invalid type). Keeping them in one map lets the REPL's snapshot
	// restore them together.
	broken map[string]bool
	// override replaces top-level names inside a train block (ZeRO-3
	// params are seen through their all-gather).
	override map[string]operand
	scope    map[string]operand // innermost function scope, nil at top level
	fn       string             // name of the function being expanded
	calls    []Pos
	chain    []Pos // calls innermost first, as the values made under them record it (callChain)
	ret      *operand
	// loopVars are the for-loop counters in force, by name.
	loopVars map[string]int
	// remat > 0 while a checkpointed function is being expanded.
	remat int
	// local names the local function whose body is being expanded ("":
	// none); its values are per-device blocks (see local.go).
	local string
	// axisAlias binds the axis parameters of the local function being
	// expanded to mesh axes (see axisArgs); aliasUsed records the ones
	// the function named, so an unused keyword is an error.
	axisAlias map[string]int
	aliasUsed map[string]bool
	// module is the library module whose function is being expanded
	// (""; a user function): its calls see the module's other functions.
	module string
	// pvaries shares one pvary per local value and axes (see pvary).
	pvaries map[pvaryKey]*Value
	// retPos is where the last return statement checked is.
	retPos Pos
	// work counts the statements checked and the values built since the
	// checker was made, loops, calls and micro-batches unrolled; tooLarge
	// is set once it passes MaxWork (see spend).
	work     int
	tooLarge bool
	// onFinal hooks run when a watched value's adjoint is complete.
	onFinal map[*Value]func(g *Value) *Value
	// grads caches the backward graph built for each differentiated scalar.
	grads map[*Value]*ad.Adjoints
	// undo takes back the last statement Stmt accepted (see Undo).
	undo *undo
	// Last is the value of the last bare expression statement (REPL).
	Last *Value
	// iterHook runs after each iteration of a train block's top-level for
	// loop (a pipeline unit ends there); nested loops do not see it.
	iterHook func()
	// copied counts the micro-batches copied from the first rather than
	// checked (train_micro.go); its tests read it.
	copied int
}

// Keys of Checker.broken that are not names (a name has no space).
const (
	brokenMesh = " mesh"
	brokenUse  = " use "
)

// maxCallDepth bounds function nesting, which is also how recursion is
// caught.
const maxCallDepth = 64

// MaxWork is the expansion budget: the statements the checker may check
// and the values it may build for one program, with every loop iteration,
// function call and micro-batch counted each time it is unrolled. One
// budget for all of them, because they multiply: loops nest, f(f(x))
// inside f doubles at every level, a train block repeats per micro-batch,
// and no bound on one of them bounds the product.
const MaxWork = 1_000_000

// spend counts one unit of work at pos. Past the budget it reports the
// line that crossed it, once, and returns false; the checker then stops
// checking (stmt and add refuse), and loops, which stop at a body's first
// error, unwind. It reports nothing else from then on (see errorf).
func (c *Checker) spend(pos Pos) bool {
	if c.tooLarge {
		return false
	}
	if c.work++; c.work > c.maxWork() {
		c.errorf(pos, "the program is too large: checking it unrolls more than %d statements and values (loops, function calls and micro-batches repeated); this line crossed the limit", c.maxWork())
		c.tooLarge = true
		return false
	}
	return true
}

// maxWork is MaxWork, or the smaller budget a test set.
func (c *Checker) maxWork() int {
	if c.opts.maxWork > 0 {
		return c.opts.maxWork
	}
	return MaxWork
}

// NewChecker starts an empty program named file.
func NewChecker(file string, src []byte, opts CheckOptions) *Checker {
	g := &Graph{File: file, Sources: map[string][]byte{file: src}}
	return &Checker{
		opts:    opts,
		g:       g,
		b:       ir.NewBuilder(g),
		globals: map[string]*Value{},
		funcs:   map[string]*FuncDef{},
		modules: map[string]map[string]*FuncDef{},
		broken:  map[string]bool{},
	}
}

// Check checks a parsed file and returns its graph.
func Check(f *File, src []byte, opts CheckOptions) (*Graph, error) {
	c := NewChecker(f.Pos.Filename, src, opts)
	if err := c.File(f); err != nil {
		return nil, err
	}
	return c.Graph(), nil
}

// CheckSource parses and checks a source text.
func CheckSource(filename string, src []byte, opts CheckOptions) (*Graph, error) {
	f, err := Parse(filename, src)
	if err != nil {
		return nil, err
	}
	return Check(f, src, opts)
}

// MaxSourceBytes bounds a program file: a path naming a device such as
// /dev/zero must fail, not be read until memory runs out.
const MaxSourceBytes = 16 << 20

// CheckFile reads, parses and checks a file; load paths are relative to it.
func CheckFile(path string, opts CheckOptions) (*Graph, map[string][]byte, error) {
	src, err := regular.ReadLimited(path, MaxSourceBytes)
	if err != nil {
		return nil, nil, err
	}
	if opts.Dir == "" {
		opts.Dir = filepath.Dir(path)
	}
	g, err := CheckSource(path, src, opts)
	if err != nil {
		return nil, map[string][]byte{path: src}, err
	}
	return g, g.Sources, nil
}

// Graph returns the graph built so far.
func (c *Checker) Graph() *Graph { return c.g }

// File checks every statement of a file.
func (c *Checker) File(f *File) error {
	c.errs = nil
	for _, s := range f.Stmts {
		c.stmt(s)
	}
	if c.g.Mesh == nil && len(c.errs) == 0 {
		c.errs = append(c.errs, errorf(f.Pos, "the program declares no mesh (add e.g. `mesh M = [dp=2]`)"))
	}
	return c.result()
}

// Stmt checks one statement (the REPL). On error the checker's state is
// unchanged: the values the statement made are dropped, and the values it
// changed that existed before it (a name given to an earlier value, a
// parameter's storage placement under ZeRO) get their old contents back.
func (c *Checker) Stmt(s *Stmt, src []byte) error {
	snap := c.snapshot()
	c.undo = nil
	c.errs = nil
	c.Last = nil
	if src != nil {
		c.g.Sources[s.Pos.Filename] = src
	}
	c.saved = map[*Value]Value{}
	defer func() { c.saved = nil }()
	c.stmt(s)
	if err := c.result(); err != nil {
		c.restore(snap)
		return err
	}
	c.undo = &undo{snap, c.saved}
	return nil
}

type undo struct {
	snap  snapshot
	saved map[*Value]Value
}

// Undo takes back the last statement Stmt accepted, as if it had failed to
// check. The REPL calls it when the statement fails at run time (an index
// out of range), so that later statements, which re-run the whole program,
// are not run with it. A second call does nothing.
func (c *Checker) Undo() {
	if c.undo == nil {
		return
	}
	c.saved = c.undo.saved
	c.restore(c.undo.snap)
	c.saved, c.undo, c.Last = nil, nil, nil
}

// touch is called before the checker changes a value in place. Within a
// REPL statement it saves the contents of a value the statement did not
// make, so that a failed statement can put them back; values the statement
// made are dropped on failure anyway. Changes replace fields, never edit
// shared slices, so a shallow copy is enough.
func (c *Checker) touch(v *Value) {
	if c.saved == nil || v.ID >= c.base {
		return
	}
	if _, ok := c.saved[v]; !ok {
		c.saved[v] = *v
	}
}

type snapshot struct {
	values, outputs int
	grads           map[*Value]*ad.Adjoints
	globals         map[string]*Value
	funcs           map[string]*FuncDef
	modules         map[string]map[string]*FuncDef
	broken          map[string]bool
	mesh            *mesh.Mesh
	meshPos         Pos
	train           *Train
	pipeline        *ir.Pipeline
	work            int
}

func (c *Checker) snapshot() snapshot {
	c.base = len(c.g.Values)
	return snapshot{len(c.g.Values), len(c.g.Outputs), maps.Clone(c.grads), maps.Clone(c.globals), maps.Clone(c.funcs),
		maps.Clone(c.modules), maps.Clone(c.broken), c.g.Mesh, c.g.MeshPos, c.g.Train, c.g.Pipeline, c.work}
}

func (c *Checker) restore(s snapshot) {
	c.g.Values = c.g.Values[:s.values]
	c.g.Outputs = c.g.Outputs[:s.outputs]
	c.grads = s.grads
	c.globals, c.funcs, c.modules, c.broken = s.globals, s.funcs, s.modules, s.broken
	c.g.Mesh, c.g.MeshPos, c.g.Train, c.g.Pipeline = s.mesh, s.meshPos, s.train, s.pipeline
	c.work, c.tooLarge = s.work, false // a REPL statement that ran out gives its budget back
	for v, old := range c.saved {
		*v = old
	}
}

// result is the errors so far; with none, the graph must verify (a
// failure is a checker bug, reported rather than passed on to lowering).
func (c *Checker) result() error {
	if len(c.errs) == 0 {
		if err := ir.Verify(c.g); err != nil {
			c.internal(c.g.MeshPos, err)
		}
	}
	if len(c.errs) == 0 {
		return nil
	}
	return c.errs.Sort()
}

func (c *Checker) errorf(pos Pos, format string, args ...any) {
	if c.tooLarge {
		// past the budget the checker refuses every statement and value,
		// so what a caller finds missing after (a function's return, the
		// loss of a train block) is the budget's doing, already reported
		return
	}
	e := errorf(pos, format, args...)
	if len(c.calls) > 0 && c.callerNamed(pos) {
		// an error inside a function names the calls that led there,
		// innermost first, as explain does: "(called from m.mesh:12:5)"
		var at []string
		for i := len(c.calls) - 1; i >= 0 && len(at) < 3; i-- {
			at = append(at, FormatPos(c.calls[i]))
		}
		if more := len(c.calls) - len(at); more > 0 {
			at = append(at, fmt.Sprintf("%d more", more))
		}
		e.Msg += " (called from " + strings.Join(at, ", ") + ")"
	}
	c.errs = append(c.errs, e)
}

// callerNamed reports whether an error at pos needs its call chain: it is
// inside a function body (not at the call itself).
func (c *Checker) callerNamed(pos Pos) bool {
	last := c.calls[len(c.calls)-1]
	return pos.Filename != last.Filename || pos.Line != last.Line || pos.Column != last.Column
}

var keywords = map[string]bool{"mesh": true, "use": true, "input": true, "param": true, "def": true, "output": true, "return": true, "train": true, "checkpoint": true, "for": true}

func (c *Checker) checkNewName(pos Pos, name string) bool {
	if keywords[name] {
		c.errorf(pos, "%q is a keyword and cannot name a value", name)
		return false
	}
	return true
}

func (c *Checker) stmt(s *Stmt) {
	if !c.spend(s.Pos) {
		return
	}
	switch {
	case s.Mesh != nil:
		c.meshDecl(s.Mesh)
	case s.Use != nil:
		c.use(s.Use)
	case s.Tensor != nil:
		c.tensorDecl(s.Tensor)
	case s.Def != nil:
		if c.scope != nil {
			c.errorf(s.Def.Pos, "functions can only be defined at top level")
			return
		}
		if _, dup := c.funcs[s.Def.Name]; dup {
			c.errorf(s.Def.Pos, "function %s is already defined", s.Def.Name)
			return
		}
		if isBuiltin(s.Def.Name) || isLocalCall(s.Def.Name) || s.Def.Name == "size" || isNumberCall(s.Def.Name) {
			c.errorf(s.Def.Pos, "%s is a built-in op and cannot be redefined", s.Def.Name)
			return
		}
		if !c.checkDef(s.Def) {
			return
		}
		c.funcs[s.Def.Name] = s.Def
	case s.Output != nil:
		c.output(s.Output)
	case s.Train != nil:
		c.trainBlock(s.Train)
	case s.For != nil:
		c.forStmt(s.For)
	case s.Return != nil:
		if c.scope == nil {
			c.errorf(s.Return.Pos, "return outside a function")
			return
		}
		op := c.expr(s.Return.Value)
		c.ret, c.retPos = &op, s.Return.Pos
	case s.Assign != nil:
		a := s.Assign
		if !c.checkNewName(a.Pos, a.Name) {
			return
		}
		op := c.expr(a.Value)
		if op.v != nil && op.v.Name == "" {
			c.touch(op.v) // grad(y, x) names an adjoint an earlier statement made
			op.v.Name = a.Name
			if c.fn != "" {
				op.v.Name = c.fn + "." + a.Name
			}
		}
		if c.scope != nil {
			c.scope[a.Name] = op
			return
		}
		if op.v == nil {
			if !op.bad {
				c.errorf(a.Value.Pos, "only tensors can be named at top level")
			}
			c.broken[a.Name] = true // already reported: later uses stay quiet
			return
		}
		delete(c.broken, a.Name)
		if old, ok := c.globals[a.Name]; ok && old.IsSource() && old.Name == a.Name {
			c.errorf(a.Pos, "%s is declared as %s at %s and cannot be reassigned", a.Name, old.Op, FormatPos(old.Pos))
			return
		}
		c.globals[a.Name] = op.v
	case s.Expr != nil:
		op := c.expr(s.Expr)
		if !c.opts.AllowExprStmt {
			c.errorf(s.Expr.Pos, "unused expression (assign it to a name or mark it `output`)")
			return
		}
		c.Last = op.v
		if op.v == nil && !op.bad {
			c.Last = c.constValue(op, F64, s.Expr.Pos)
		}
	}
}

// maxLoop bounds a for loop's count.
const maxLoop = 10000

func (c *Checker) forStmt(f *ForStmt) {
	if !c.loopCount(f) {
		// the body never runs: what it assigns is undefined, and its
		// uses are followers of the error reported here
		if c.scope == nil {
			for _, s := range f.Body {
				if s.Assign != nil && c.globals[s.Assign.Name] == nil {
					c.broken[s.Assign.Name] = true
				}
			}
		}
	}
}

// loopCount checks a for loop's header and, when it is valid, runs the
// body; false when the header was rejected.
func (c *Checker) loopCount(f *ForStmt) bool {
	count := 0
	if f.Count != nil {
		count = *f.Count
	} else {
		op := c.lookup(f.Pos, f.Name)
		if op.num == nil || *op.num != math.Trunc(*op.num) {
			if !op.bad {
				c.errorf(f.Pos, "for: range(%s) needs an integer", f.Name)
			}
			return false
		}
		count = int(*op.num)
	}
	if count < 0 || count > maxLoop {
		c.errorf(f.Pos, "for: range(%d) out of bounds (0 to %d)", count, maxLoop)
		return false
	}
	if keywords[f.Var] {
		c.errorf(f.Pos, "%q is a keyword and cannot name a loop counter", f.Var)
		return false
	}
	if _, clash := c.loopVars[f.Var]; clash {
		c.errorf(f.Pos, "loop counter %s is already in use by an enclosing loop", f.Var)
		return false
	}
	if c.loopVars == nil {
		c.loopVars = map[string]int{}
	}
	defer delete(c.loopVars, f.Var)
	hook := c.iterHook
	c.iterHook = nil
	defer func() { c.iterHook = hook }()
	nerr := len(c.errs)
	for i := 0; i < count; i++ {
		if hook != nil && i > 0 {
			hook()
		}
		c.loopVars[f.Var] = i
		for _, s := range f.Body {
			switch {
			case s.Mesh != nil, s.Use != nil, s.Tensor != nil, s.Def != nil, s.Train != nil, s.Output != nil:
				if i == 0 {
					c.errorf(s.Pos, "a for loop repeats assignments (and return, inside a function) only")
				}
				continue
			}
			c.stmt(s)
			if c.ret != nil {
				return true
			}
		}
		if len(c.errs) > nerr {
			return true // report a body's errors once, not once per iteration
		}
	}
	return true
}

func (c *Checker) meshDecl(d *MeshDecl) {
	if c.g.Mesh != nil {
		c.errorf(d.Pos, "mesh %s is already declared at %s (one mesh per program)", c.g.Mesh.Name, FormatPos(c.g.MeshPos))
		return
	}
	c.broken[brokenMesh] = true // until the mesh is accepted below
	if len(d.Axes) > 4 {
		c.errorf(d.Pos, "mesh %s has %d axes; at most 4 are supported", d.Name, len(d.Axes))
		return
	}
	m := mesh.New(d.Name)
	seen := map[string]bool{}
	pipe := -1
	for i, a := range d.Axes {
		if a.Pipe && pipe >= 0 {
			c.errorf(a.Pos, "mesh %s has two pipeline axes (%s and %s); one carries the stages", d.Name, d.Axes[pipe].Name, a.Name)
			return
		}
		if a.Pipe {
			pipe = i
		}
		if seen[a.Name] {
			c.errorf(a.Pos, "mesh axis %q is declared twice", a.Name)
			return
		}
		seen[a.Name] = true
		if a.Size < 1 || a.Size > 4096 {
			c.errorf(a.Pos, "mesh axis %s has size %d; want 1 to 4096", a.Name, a.Size)
			return
		}
		size := a.Size
		if c.opts.SingleDevice && !a.Pipe {
			size = 1 // the pipeline axis keeps its stages: lowering onto one device runs them in order
		}
		m.Axes = append(m.Axes, mesh.Axis{Name: a.Name, Size: size})
	}
	if m.Size() > 1<<16 {
		c.errorf(d.Pos, "mesh %s has %d devices; at most 65536 are supported", d.Name, m.Size())
		return
	}
	if c.opts.Devices > 0 && m.Size() > c.opts.Devices {
		c.errorf(d.Pos, "mesh %s %s needs %d devices but only %d are available (--devices)", d.Name, m, m.Size(), c.opts.Devices)
		return
	}
	c.g.Mesh = m
	c.g.MeshPos = d.Pos
	if pipe >= 0 {
		// placements name the other axes: the pipeline axis carries stages
		c.g.Pipeline = &ir.Pipeline{Axis: pipe, Full: m, Pos: d.Axes[pipe].Pos}
		stages := mesh.New(d.Name)
		for i, a := range m.Axes {
			if i != pipe {
				stages.Axes = append(stages.Axes, a)
			}
		}
		c.g.Mesh = stages
	}
	delete(c.broken, brokenMesh)
}

func (c *Checker) use(u *UseStmt) {
	if _, done := c.modules[u.Module]; done {
		return
	}
	src, ok := stdlib.Source(u.Module)
	if !ok {
		c.errorf(u.Pos, "unknown module %q%s", u.Module, didYouMean(u.Module, stdlib.Modules()))
		c.broken[brokenUse+u.Module] = true
		return
	}
	name := "stdlib/" + u.Module + ".mesh"
	f, err := Parse(name, src)
	c.g.Sources[name] = src
	if err != nil {
		c.errs = append(c.errs, err.(ErrorList)...)
		return
	}
	defs := map[string]*FuncDef{}
	for _, s := range f.Stmts {
		if s.Def == nil {
			c.errorf(s.Pos, "a library module may only define functions")
			continue
		}
		if c.checkDef(s.Def) {
			defs[s.Def.Name] = s.Def
		}
	}
	c.modules[u.Module] = defs
}

func (c *Checker) output(o *OutputStmt) {
	if c.scope != nil {
		c.errorf(o.Pos, "output belongs at top level")
		return
	}
	v, ok := c.globals[o.Name]
	if !ok {
		if !c.broken[o.Name] {
			c.errorf(o.Pos, "unknown name %q%s", o.Name, didYouMean(o.Name, c.names()))
		}
		return
	}
	out := &Output{Name: o.Name, Value: v, Pos: o.Pos}
	if o.Placement != nil {
		p, ok := c.placement(o.Placement, v.Type)
		if !ok {
			return
		}
		out.Placement = p
	}
	for _, prev := range c.g.Outputs {
		if prev.Name == o.Name {
			c.errorf(o.Pos, "%s is already an output (at %s)", o.Name, FormatPos(prev.Pos))
			return
		}
	}
	c.g.Outputs = append(c.g.Outputs, out)
}

// callChain is c.calls innermost first. The values made inside one call
// share one slice (a function's body is most of a deep model's values);
// its capacity is its length, so an append to a value's Calls copies it.
func (c *Checker) callChain() []Pos {
	n := len(c.calls)
	if len(c.chain) == n {
		same := true
		for i := range n {
			if c.chain[i] != c.calls[n-1-i] {
				same = false
				break
			}
		}
		if same {
			return c.chain
		}
	}
	chain := make([]Pos, n)
	for i := range n {
		chain[i] = c.calls[n-1-i]
	}
	c.chain = chain
	return chain
}

func (c *Checker) names() []string {
	var out []string
	for n := range c.globals {
		out = append(out, n)
	}
	for n := range c.scope {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Names lists the top-level tensors, for the REPL.
func (c *Checker) Names() map[string]*Value { return c.globals }

// add appends v to the graph through the IR builder. A value the builder
// rejects is a checker bug: it is reported at v's position, so the
// statement fails (and the REPL rolls back), and v comes back invalid (ID
// -1) so the code building on it carries on without a panic. Values built
// from an invalid one are dropped quietly: the first error is the one to read.
func (c *Checker) add(v *Value) *Value {
	if c.remat > 0 && !v.Backward {
		v.Remat = true
	}
	if len(c.calls) > 0 {
		if len(v.Calls) == 0 {
			v.Calls = c.callChain()
		} else {
			for i := len(c.calls) - 1; i >= 0; i-- {
				v.Calls = append(v.Calls, c.calls[i])
			}
		}
	}
	for _, a := range v.Args {
		if invalid(a) {
			v.ID = -1
			return v
		}
	}
	if !c.spend(v.Pos) {
		v.ID = -1
		return v
	}
	if !v.Type.Sized() {
		// a program error, not a checker bug: broadcasting, matmul or
		// reshape of in-range operands can build an uncountable result
		c.errorf(v.Pos, "%s: result of shape %s is too large (more than 2^40 elements)", v.Op, ShapeString(v.Type.Shape))
		v.ID = -1
		return v
	}
	if !c.localize(v) {
		v.ID = -1
		return v
	}
	if _, err := c.b.Add(v); err != nil {
		c.internal(v.Pos, err)
		v.ID = -1
	}
	return v
}

// invalid reports a value that failed to join the graph (see add).
func invalid(v *Value) bool { return v != nil && v.ID < 0 }

// internal reports a checker bug found by the IR builder or verifier.
func (c *Checker) internal(pos Pos, err error) {
	if e, ok := err.(*Error); ok {
		pos = e.Pos
		err = errors.New(e.Msg)
	}
	c.errorf(pos, "internal error: %v", err)
}

func (c *Checker) constValue(op operand, dt DType, pos Pos) *Value {
	return c.add(&Value{Op: "const", Type: Type{DType: dt, Shape: []int{}}, Attrs: Attrs{Scalar: *op.num}, Pos: pos})
}

func plural(n int, s string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, s)
	}
	return fmt.Sprintf("%d %ss", n, s)
}
