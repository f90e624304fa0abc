package planner

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/meshrun/meshrun/internal/regular"
	"github.com/meshrun/meshrun/lang"
)

// Program is a parsed .mesh file and the places a candidate rewrites: the
// mesh declaration's axis list, the train block's strategy settings, the
// `checkpoint` marks of the functions the train block calls, and the
// paths of load("…") (made relative to wherever the plan is written).
// Rewriting is textual, at the parser's offsets, so everything else in
// the file — comments included — stays as the user wrote it.
type Program struct {
	Path string
	Src  []byte

	MeshName string
	Axes     []string // the declared axes other than the pipeline axis, in order
	Declared []int    // their declared sizes
	PipeName string   // the pipeline axis's name (declared, or "pp")
	PipePos  int      // its declared position; -1 without one
	meshOpen int      // offsets just inside "[" and at "]"
	meshEnd  int

	HasTrain   bool
	Units      int             // the train block's units: statements that compute, loop iterations
	trainClose int             // offset of the train block's closing brace
	settings   map[string]span // zero, microbatches, accumulate, pipeline
	Defs       []Def           // the functions the train block calls directly
	loads      []span          // string literals of load("…")
	params     []paramDecl     // parameters with positional placements

	// for folding (fold.go)
	stmts            []trainStmt
	paramDecl        map[string]span     // each parameter's declaration, to its line's end
	paramSig         map[string]string   // the declaration without the name
	usedOutsideTrain map[string]int      // identifier uses outside the train block and declarations
	defIDs           map[string][]string // each function's identifiers (the globals it reads among them)
	noFold           bool                // a for loop or stage marks in the train block
}

// Def is a function the train block calls directly: a block whose
// activations checkpointing may recompute.
type Def struct {
	Name       string
	Checkpoint bool // marked in the source
	off        int  // where "checkpoint def" or "def" starts
}

type span struct{ start, end int }

// blockSettings are the train block's settings, which are not units.
var blockSettings = map[string]bool{"steps": true, "zero": true, "clip": true, "optimizer": true, "schedule": true,
	"accumulate": true, "batch": true, "precision": true, "data_axis": true, "microbatches": true, "pipeline": true,
	"stage": true}

// settingNames are the train block settings a candidate rewrites.
var settingNames = []string{"zero", "microbatches", "accumulate", "pipeline", "offload"}

// Load reads and parses a program. Check errors come later, per candidate.
func Load(path string) (*Program, error) {
	src, err := regular.ReadLimited(path, lang.MaxSourceBytes)
	if err != nil {
		return nil, err
	}
	return loadSource(path, src)
}

// loadSource parses a program's text (path names it in messages and
// anchors its load paths).
func loadSource(path string, src []byte) (*Program, error) {
	f, err := lang.Parse(path, src)
	if err != nil {
		return nil, err
	}
	p := &Program{Path: path, Src: src, PipePos: -1, PipeName: "pp", settings: map[string]span{}}
	defs := map[string]*lang.FuncDef{}
	p.declarations(f)
	for _, s := range f.Stmts {
		switch {
		case s.Mesh != nil:
			p.mesh(s.Mesh)
		case s.Def != nil:
			defs[s.Def.Name] = s.Def
		case s.Tensor != nil:
			p.load(s.Tensor)
			p.param(s.Tensor)
		}
	}
	if p.meshEnd == 0 {
		return nil, fmt.Errorf("%s: the program declares no mesh; the planner rewrites its mesh declaration", path)
	}
	for _, s := range f.Stmts {
		if s.Train != nil {
			p.train(s.Train, defs)
		}
	}
	return p, nil
}

func (p *Program) mesh(m *lang.MeshDecl) {
	p.MeshName = m.Name
	p.meshOpen = bytes.IndexByte(p.Src[m.Pos.Offset:], '[') + m.Pos.Offset + 1
	last := m.Axes[len(m.Axes)-1].Pos.Offset
	p.meshEnd = bytes.IndexByte(p.Src[last:], ']') + last
	for i, a := range m.Axes {
		if a.Pipe {
			p.PipeName, p.PipePos = a.Name, i
			continue
		}
		p.Axes = append(p.Axes, a.Name)
		p.Declared = append(p.Declared, a.Size)
	}
}

func (p *Program) load(t *lang.TensorDecl) {
	if t.Init == nil || len(t.Init.Ops) > 0 || len(t.Init.Left.Ops) > 0 || t.Init.Left.Left.Prim == nil {
		return
	}
	c := t.Init.Left.Left.Prim.Call
	if c == nil || c.Name != "load" || c.Module != "" || len(c.Args) != 1 {
		return
	}
	if lit := c.Args[0].Value.Left.Left.Prim; lit != nil && lit.String != nil {
		start := lit.Pos.Offset
		if start < len(p.Src) && p.Src[start] == '"' {
			if end := bytes.IndexByte(p.Src[start+1:], '"'); end >= 0 {
				p.loads = append(p.loads, span{start, start + end + 2})
			}
		}
	}
}

func (p *Program) train(t *lang.TrainBlock, defs map[string]*lang.FuncDef) {
	p.HasTrain = true
	p.trainClose = closingBrace(p.Src, t.Pos.Offset)
	called := map[string]bool{}
	for i, s := range t.Body {
		end := p.trainClose
		if i+1 < len(t.Body) {
			end = t.Body[i+1].Pos.Offset
		}
		if s.Assign != nil && (slices.Contains(settingNames, s.Assign.Name) || s.Assign.Name == "batch") {
			p.settings[s.Assign.Name] = span{s.Pos.Offset, lineEnd(p.Src, s.Pos.Offset, end)}
		}
		unit := false
		switch {
		case s.For != nil && s.For.Count != nil:
			p.Units += *s.For.Count
			p.noFold = true
		case s.For != nil:
			p.Units++ // a count named by a variable: at least one
			p.noFold = true
		case s.Assign != nil && !blockSettings[s.Assign.Name]:
			p.Units++
			unit = true
		case s.Assign != nil && s.Assign.Name == "stage":
			p.noFold = true
		}
		text := p.Src[s.Pos.Offset:end]
		p.stmts = append(p.stmts, trainStmt{span: span{s.Pos.Offset, end}, unit: unit, ids: identifiers(text)})
		for _, id := range identifiers(text) {
			p.usedOutsideTrain[id]-- // declarations counted every use; the train block's are not outside
		}
		calls(text, called)
	}
	for name := range called {
		if d := defs[name]; d != nil {
			p.Defs = append(p.Defs, Def{Name: name, Checkpoint: d.Checkpoint, off: d.Pos.Offset})
		}
	}
	slices.SortFunc(p.Defs, func(a, b Def) int { return a.off - b.off })
}

// declarations records each parameter's declaration and signature, and
// counts every identifier's uses outside the declarations (train() takes
// the train block's back out).
func (p *Program) declarations(f *lang.File) {
	p.paramDecl, p.paramSig, p.usedOutsideTrain = map[string]span{}, map[string]string{}, map[string]int{}
	p.defIDs = map[string][]string{}
	for i, s := range f.Stmts {
		end := len(p.Src)
		if i+1 < len(f.Stmts) {
			end = f.Stmts[i+1].Pos.Offset
		}
		if t := s.Tensor; t != nil && t.Kind == "param" {
			p.paramDecl[t.Name] = span{s.Pos.Offset, end}
			text := string(p.Src[s.Pos.Offset:lineEnd(p.Src, s.Pos.Offset, end)])
			_, sig, _ := strings.Cut(text, ":") // "param NAME : TYPE …"
			p.paramSig[t.Name] = sig
			continue
		}
		ids := identifiers(p.Src[s.Pos.Offset:end])
		for _, id := range ids {
			p.usedOutsideTrain[id]++
		}
		if s.Def != nil {
			p.defIDs[s.Def.Name] = ids
		}
	}
}

// calls adds the names written as NAME( in a statement's text.
func calls(text []byte, into map[string]bool) {
	for i := 0; i < len(text); i++ {
		if text[i] == '#' {
			for i < len(text) && text[i] != '\n' {
				i++
			}
			continue
		}
		if text[i] != '(' {
			continue
		}
		j := i
		for j > 0 && isIdent(text[j-1]) {
			j--
		}
		if j < i {
			into[string(text[j:i])] = true
		}
	}
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// closingBrace finds the "}" matching the first "{" at or after from,
// skipping comments and strings.
func closingBrace(src []byte, from int) int {
	depth := 0
	for i := from; i < len(src); i++ {
		switch src[i] {
		case '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case '"':
			for i++; i < len(src) && src[i] != '"'; i++ {
			}
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return i
			}
		}
	}
	return len(src)
}

// lineEnd is where a one-line statement starting at from ends: before a
// comment or the line's end, and not past limit; trailing blanks dropped.
func lineEnd(src []byte, from, limit int) int {
	end := from
	for end < limit && src[end] != '\n' && src[end] != '#' {
		end++
	}
	for end > from && (src[end-1] == ' ' || src[end-1] == '\t' || src[end-1] == '\r') {
		end--
	}
	return end
}

type edit struct {
	span
	text string
}

// Source writes the program with candidate c's strategy. dir is the
// directory the file will live in: load paths are rewritten relative to it
// (the empty string keeps them).
func (p *Program) Source(c *Candidate, dir string) []byte {
	var eds []edit
	eds = append(eds, edit{span{p.meshOpen, p.meshEnd}, p.meshText(c)})
	want := map[string]string{}
	if c.Zero > 0 {
		want["zero"] = strconv.Itoa(c.Zero)
	}
	if c.Offload {
		want["offload"] = "optimizer"
	}
	if c.PP > 1 {
		want["microbatches"] = strconv.Itoa(c.Micro)
		want["pipeline"] = c.Schedule
	} else if c.Micro > 1 {
		want["accumulate"] = strconv.Itoa(c.Micro)
	}
	var add []string
	if c.batch > 0 { // a proxy's (compose.go)
		if sp, had := p.settings["batch"]; had {
			eds = append(eds, edit{sp, "batch = " + strconv.Itoa(c.batch)})
		} else {
			add = append(add, "    batch = "+strconv.Itoa(c.batch)+"\n")
		}
	}
	for _, name := range settingNames {
		v, ok := want[name]
		sp, had := p.settings[name]
		switch {
		case had && ok:
			eds = append(eds, edit{sp, name + " = " + v})
		case had:
			eds = append(eds, edit{sp, ""})
		case ok:
			add = append(add, "    "+name+" = "+v+"  # chosen by meshrun plan\n")
		}
	}
	if len(add) > 0 {
		at := p.trainClose
		for at > 0 && (p.Src[at-1] == ' ' || p.Src[at-1] == '\t') {
			at--
		}
		text := strings.Join(add, "")
		if at > 0 && p.Src[at-1] != '\n' {
			text = "\n" + text
		}
		eds = append(eds, edit{span{at, at}, text})
	}
	for i, d := range p.Defs {
		on := c.Checkpoint[i]
		switch {
		case on && !d.Checkpoint:
			eds = append(eds, edit{span{d.off, d.off}, "checkpoint "})
		case !on && d.Checkpoint:
			k := bytes.Index(p.Src[d.off:], []byte("def"))
			eds = append(eds, edit{span{d.off, d.off + k}, ""})
		}
	}
	eds = append(eds, p.placementEdits(c)...)
	if dir != "" {
		eds = append(eds, p.loadEdits(dir)...)
	}
	slices.SortFunc(eds, func(a, b edit) int { return a.start - b.start })
	var out bytes.Buffer
	at := 0
	for _, e := range eds {
		out.Write(p.Src[at:e.start])
		out.WriteString(e.text)
		at = e.end
	}
	out.Write(p.Src[at:])
	return out.Bytes()
}

// meshText is the axis list of c's mesh.
func (p *Program) meshText(c *Candidate) string {
	var axes []string
	for i, name := range p.Axes {
		axes = append(axes, fmt.Sprintf("%s=%d", name, c.Sizes[i]))
	}
	if c.PP > 1 || len(axes) == 0 {
		// a mesh needs an axis: a program with only a pipeline axis keeps
		// it, of size 1, for a candidate without a pipeline
		pipe := fmt.Sprintf("pipeline %s=%d", p.PipeName, c.PP)
		axes = slices.Insert(axes, min(c.PPPos, len(axes)), pipe)
	}
	return strings.Join(axes, ", ")
}

// loadEdits makes every load path, relative to the program, relative to dir.
func (p *Program) loadEdits(dir string) []edit {
	var eds []edit
	from := filepath.Dir(p.Path)
	for _, sp := range p.loads {
		lit, err := strconv.Unquote(string(p.Src[sp.start:sp.end]))
		if err != nil || filepath.IsAbs(lit) {
			continue
		}
		target, err1 := filepath.Abs(filepath.Join(from, lit))
		base, err2 := filepath.Abs(dir)
		if err1 != nil || err2 != nil {
			continue
		}
		rel, err := filepath.Rel(base, target)
		if err != nil {
			rel = target
		}
		eds = append(eds, edit{sp, strconv.Quote(filepath.ToSlash(rel))})
	}
	return eds
}
