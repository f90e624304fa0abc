package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
	"golang.org/x/term"
)

const replHelp = `Type statements of the .mesh language, or an expression to evaluate.
Start with a mesh, then declare tensors:
  mesh M = [dp=2, tp=2]
  param W : f32[8, 8] {B, S(1)} = normal(0, 1)
  input x : f32[4, 8] {S(0), B} = ones
  x @ W
Each result shows its placement, its local shape per device, the collectives
the compiler inserted for it, and its value. A statement may span lines;
an empty line ends it.
commands:
  :layout NAME   draw which device holds which block of NAME
  :explain       the explain report of everything defined so far
  :blocks        which block each device holds at each collective of the
                 last local function call; ':blocks step' shows one
                 collective per Enter (any other input stops)
  :names         the tensors defined so far, with their placements
  :reset         forget everything
  :help          this text
  :quit          leave (also Ctrl-D)
`

// session is one REPL: a checker that accumulates the program, re-lowered
// and re-run after every statement so results are always those of the
// whole program.
type session struct {
	out     io.Writer
	c       *common
	checker *lang.Checker
	n       int
	// pages are the rest of a ':blocks step' walk, one per Enter.
	pages []string
	// runContext gives the context of one run and a function to call
	// after it; on a terminal Ctrl-C cancels the context (see interactive).
	runContext func() (context.Context, func())
}

func backgroundRun() (context.Context, func()) { return context.Background(), func() {} }

func (e *env) repl(args []string) int {
	var c common
	fs := newFlags(e, "repl", "repl [--devices N] [--seed N]")
	c.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	k := newChecks(e, fs)
	c.validate(k)
	for _, name := range []string{"dump-after", "launcher"} {
		if k.set[name] {
			k.fail("--%s: not used by the repl (it runs each statement on in-process devices; :explain shows the plan)", name)
		}
	}
	if len(pos) > 0 {
		k.fail("takes no FILE, got %s (type statements, or pipe them in)", strings.Join(pos, " "))
	}
	if !e.report(k) {
		return ExitUsage
	}
	s := &session{c: &c, runContext: backgroundRun}
	s.reset()
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return s.interactive(f, e.stdout)
	}
	s.out = e.stdout
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var buf []string
	for sc.Scan() {
		if s.feed(&buf, sc.Text()) {
			return ExitOK
		}
	}
	if len(buf) > 0 {
		s.eval(strings.Join(buf, "\n"), true)
	}
	return ExitOK
}

// interactive runs the REPL on a terminal with line editing and history
// (golang.org/x/term). As in a shell, Ctrl-C cancels the line being typed
// (and the statement's earlier lines) or the run in progress, and Ctrl-D
// on an empty line quits.
func (s *session) interactive(f *os.File, w io.Writer) int {
	fd := int(f.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		fmt.Fprintln(w, "meshrun: cannot use the terminal:", err)
		return ExitFailure
	}
	defer term.Restore(fd, old)
	// during a run the terminal is back in its normal mode, where Ctrl-C
	// sends SIGINT, which cancels the run's context
	s.runContext = func() (context.Context, func()) {
		term.Restore(fd, old)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		return ctx, func() {
			if ctx.Err() != nil {
				fmt.Fprintln(w) // end the line the terminal echoed ^C on
			}
			stop()
			term.MakeRaw(fd)
		}
	}
	in := &interruptReader{r: f}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{in, w}, "meshrun> ")
	s.out = t
	fmt.Fprintln(t, "meshrun REPL — :help for help, :quit or Ctrl-D to leave, Ctrl-C cancels a line or a run")
	return s.lines(t, in)
}

// lines reads and evaluates lines until Ctrl-D or :quit.
func (s *session) lines(t *term.Terminal, in *interruptReader) int {
	var buf []string
	for {
		if len(buf) > 0 {
			t.SetPrompt("     ... ")
		} else {
			t.SetPrompt("meshrun> ")
		}
		line, err := t.ReadLine()
		if in.interrupted {
			in.interrupted = false
			buf = nil // cancel the statement being typed
			fmt.Fprintln(t, "^C")
			continue
		}
		if err != nil {
			return ExitOK // Ctrl-D on an empty line, or the input ended
		}
		if s.feed(&buf, line) {
			return ExitOK
		}
	}
}

// interruptReader turns Ctrl-C into the end of the line, and notes it.
// x/term's ReadLine reports Ctrl-C like Ctrl-D (io.EOF) and cannot be
// read again after it, so Ctrl-C never reaches it: the line ends, and the
// REPL, seeing interrupted, throws the line away. Bytes before a Ctrl-C
// are returned by one Read and the Ctrl-C by the next, so the flag is set
// exactly when the interrupted line is the one being read.
type interruptReader struct {
	r           io.Reader
	pending     []byte
	interrupted bool
}

const ctrlC = 3

func (ir *interruptReader) Read(p []byte) (int, error) {
	if len(ir.pending) == 0 {
		buf := make([]byte, len(p))
		n, err := ir.r.Read(buf)
		if n == 0 {
			return 0, err
		}
		ir.pending = buf[:n]
	}
	if ir.pending[0] == ctrlC {
		ir.pending = ir.pending[1:]
		ir.interrupted = true
		p[0] = '\r'
		return 1, nil
	}
	end := bytes.IndexByte(ir.pending, ctrlC)
	if end < 0 {
		end = len(ir.pending)
	}
	n := copy(p, ir.pending[:end])
	ir.pending = ir.pending[n:]
	return n, nil
}

func (s *session) reset() {
	s.checker = lang.NewChecker("<repl>", nil, lang.CheckOptions{Devices: s.c.devices, AllowExprStmt: true, Dir: "."})
}

// feed takes one line; it returns true when the session should end.
func (s *session) feed(buf *[]string, line string) bool {
	trimmed := strings.TrimSpace(line)
	if s.stepBlocks(len(*buf) == 0 && trimmed == "") {
		return false
	}
	if len(*buf) == 0 && strings.HasPrefix(trimmed, ":") {
		return s.command(trimmed)
	}
	if trimmed == "" {
		if len(*buf) > 0 {
			s.eval(strings.Join(*buf, "\n"), true)
			*buf = nil
		}
		return false
	}
	*buf = append(*buf, line)
	if s.eval(strings.Join(*buf, "\n"), false) {
		*buf = nil
	}
	return false
}

// eval parses and runs src. Unless final, an input that ends too early is
// left for more lines (it returns false).
func (s *session) eval(src string, final bool) bool {
	s.n++
	name := fmt.Sprintf("<repl:%d>", s.n)
	f, err := lang.Parse(name, []byte(src))
	if err != nil {
		if !final && strings.Contains(err.Error(), "unexpected end of file") {
			s.n--
			return false
		}
		fmt.Fprint(s.out, lang.Render(err, map[string][]byte{name: []byte(src)}))
		return true
	}
	for _, st := range f.Stmts {
		if err := s.checker.Stmt(st, []byte(src)); err != nil {
			fmt.Fprint(s.out, lang.Render(err, s.checker.Graph().Sources))
			return true
		}
		if !s.show(st, name) {
			// every later statement re-runs the whole program: keeping a
			// statement that fails to run would make each of them fail
			s.checker.Undo()
			fmt.Fprintln(s.out, "  (the statement is undone; everything before it is kept)")
			return true
		}
	}
	return true
}

// show prints what a statement defined, running it if it made a value; it
// returns false when that value could not be lowered or run.
func (s *session) show(st *lang.Stmt, file string) bool {
	names := s.checker.Names()
	switch {
	case st.Mesh != nil:
		m := s.checker.Graph().Mesh
		fmt.Fprintf(s.out, "mesh %s = %s: %d devices\n", m.Name, m, m.Size())
	case st.Def != nil:
		var params []string
		for _, p := range st.Def.Params {
			params = append(params, p.Name)
		}
		kind := ""
		if st.Def.Local {
			kind = "local function "
		}
		fmt.Fprintf(s.out, "defined %s%s(%s)\n", kind, st.Def.Name, strings.Join(params, ", "))
	case st.Use != nil:
		fmt.Fprintf(s.out, "using module %s\n", st.Use.Module)
	case st.Output != nil:
		fmt.Fprintf(s.out, "%s marked as output\n", st.Output.Name)
	case st.Tensor != nil:
		return s.showValue(names[st.Tensor.Name], st.Tensor.Name, file)
	case st.Assign != nil:
		return s.showValue(names[st.Assign.Name], st.Assign.Name, file)
	case st.Expr != nil:
		return s.showValue(s.checker.Last, "", file)
	}
	return true
}

// lowerWith lowers the program so far, with v as an extra output.
func (s *session) lowerWith(v *ir.Value) (*lower.Plan, error) {
	g := *s.checker.Graph()
	g.Outputs = nil
	if v != nil {
		g.Outputs = []*ir.Output{{Name: "_", Value: v}}
	}
	opts := lower.Options{KeepDead: true, Verify: s.c.verify, Memory: s.c.memoryBudget(1, false)}
	s.c.bucket.apply(&opts)
	if g.Mesh != nil {
		topo, err := s.c.topology(&g, io.Discard) // --alpha, --bandwidth, --link
		if err != nil {
			return nil, err
		}
		opts.Topo = topo
		opts.Memory = s.c.memoryBudget(deviceCount(&g), false)
	}
	return lower.Lower(&g, opts)
}

func (s *session) showValue(v *ir.Value, name, file string) bool {
	if v == nil {
		return true
	}
	if name == "" {
		name = v.Label()
	}
	p, err := s.lowerWith(v)
	if err != nil {
		fmt.Fprint(s.out, lang.Render(err, s.checker.Graph().Sources))
		return false
	}
	pl := p.Placement[v]
	fmt.Fprintf(s.out, "%s : %s %s\n", name, v.Type, pl)
	shapes := map[string][]int{}
	var keys []string
	for d := 0; d < p.Mesh.Size(); d++ {
		k := ir.ShapeString(sbp.LocalShape(p.Mesh, v.Type.Shape, pl, d))
		if _, ok := shapes[k]; !ok {
			keys = append(keys, k)
		}
		shapes[k] = append(shapes[k], d)
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s on %s", k, lower.DeviceRanges(shapes[k])))
	}
	fmt.Fprintf(s.out, "  local: %s\n", strings.Join(parts, "; "))
	n := 0
	for _, c := range p.Convs {
		if c.Pos.Filename != file {
			continue
		}
		for _, st := range c.Path.Steps {
			n++
			fmt.Fprintf(s.out, "  inserted: %s of %s over %s %s → %s, %s per device, %.2f us (for %s)\n",
				st.Kind, c.Value.Label(), p.Mesh.Axes[st.Axis].Name, st.From, st.To, lower.HumanBytes(st.Bytes), st.Time*1e6, c.Cause)
		}
	}
	if n == 0 && v.Op != "input" && v.Op != "param" {
		fmt.Fprintln(s.out, "  inserted: no collectives")
	}
	ctx, done := s.runContext()
	res, err := rt.Run(ctx, p, rt.Options{Seed: s.c.seed, Timeout: s.c.timeout})
	cancelled := ctx.Err() != nil // before done, which may cancel ctx itself
	done()
	if cancelled {
		fmt.Fprintln(s.out, "  run cancelled")
		return false
	}
	if err != nil {
		fmt.Fprintf(s.out, "  run failed: %v\n", err)
		return false
	}
	fmt.Fprintf(s.out, "  value: %s\n", preview(res.Outputs[0]))
	return true
}

// command runs a ':' command; it returns true to end the session.
func (s *session) command(line string) bool {
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case ":quit", ":q", ":exit":
		return true
	case ":help", ":h":
		fmt.Fprint(s.out, replHelp)
	case ":reset":
		s.reset()
		fmt.Fprintln(s.out, "forgot everything")
	case ":names":
		p, err := s.lowerWith(nil)
		if err != nil {
			fmt.Fprint(s.out, lang.Render(err, s.checker.Graph().Sources))
			return false
		}
		names := s.checker.Names()
		var keys []string
		for k := range names {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(s.out, "  %s : %s %s\n", k, names[k].Type, p.Placement[names[k]])
		}
	case ":layout":
		v, ok := s.checker.Names()[arg]
		if !ok {
			fmt.Fprintf(s.out, ":layout: unknown name %q\n", arg)
			return false
		}
		p, err := s.lowerWith(v)
		if err != nil {
			fmt.Fprint(s.out, lang.Render(err, s.checker.Graph().Sources))
			return false
		}
		fmt.Fprintf(s.out, "%s: %s", arg, sbp.Draw(p.Mesh, v.Type.Shape, p.Placement[v]))
	case ":blocks":
		s.blocks(arg)
	case ":explain":
		if s.checker.Graph().Mesh == nil {
			fmt.Fprintln(s.out, ":explain: declare a mesh first")
			return false
		}
		p, err := s.lowerWith(nil)
		if err != nil {
			fmt.Fprint(s.out, lang.Render(err, s.checker.Graph().Sources))
			return false
		}
		fmt.Fprint(s.out, lower.Explain(p).Text())
	default:
		fmt.Fprintf(s.out, "unknown command %s (:help lists them)\n", cmd)
	}
	return false
}
