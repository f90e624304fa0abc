package difftest

import (
	"fmt"
	"hash/fnv"
	"math/rand"
	"strings"
)

// choices turns fuzz bytes into decisions: each decision reads one byte,
// so a mutation of the input changes one choice of the program; once the
// bytes run out, a generator seeded by them takes over.
type choices struct {
	b []byte
	i int
	r *rand.Rand
}

func newChoices(b []byte) *choices {
	h := fnv.New64a()
	h.Write(b)
	return &choices{b: b, r: rand.New(rand.NewSource(int64(h.Sum64())))}
}

// n returns a choice in [0, k).
func (c *choices) n(k int) int {
	if k <= 1 {
		return 0
	}
	if c.i < len(c.b) {
		c.i++
		return int(c.b[c.i-1]) % k
	}
	return c.r.Intn(k)
}

func (c *choices) pct(p int) bool { return c.n(100) < p }

var floats = []string{"f64", "f32", "bf16", "f16"}

// value is a named tensor of the program being generated.
type value struct {
	name  string
	dt    string
	shape []int
}

func (v value) rank() int { return len(v.shape) }

// gen builds one random program: a mesh, inputs with random placements
// (uneven splits, P and P(max) included), then statements applying random
// ops to earlier values, some of them outputs.
type gen struct {
	c      *choices
	axes   []int
	lines  []string
	vals   []value // float values the ops may use
	inputs []value // float inputs (grad targets)
	next   int
	isOut  map[string]bool
	grads  int
}

// Program returns the source of a random program.
func Program(data []byte) string {
	g := &gen{c: newChoices(data), isOut: map[string]bool{}}
	g.mesh()
	dt := floats[g.c.n(len(floats))]
	for k := 1 + g.c.n(2); k > 0; k-- {
		g.input(dt, g.shape(1+g.c.n(3)))
	}
	for k := 2 + g.c.n(6); k > 0; k-- {
		g.statement()
	}
	// every value is an output: lowering drops what no output needs, and
	// an op that is not run is not tested (inputs too: the tolerance of
	// half precision reads the magnitudes an output was computed from)
	for _, v := range g.vals {
		if !g.isOut[v.name] {
			g.output(v)
		}
	}
	return strings.Join(g.lines, "\n") + "\n"
}

func (g *gen) mesh() {
	n := 1 + g.c.n(3)
	var parts []string
	total := 1
	for a := 0; a < n; a++ {
		size := 1 + g.c.n(4)
		if total*size > 8 {
			size = 1
		}
		total *= size
		g.axes = append(g.axes, size)
		parts = append(parts, fmt.Sprintf("%c=%d", 'a'+a, size))
	}
	g.lines = append(g.lines, "mesh M = ["+strings.Join(parts, ", ")+"]")
}

func (g *gen) shape(rank int) []int {
	s := make([]int, rank)
	for i := range s {
		s[i] = 1 + g.c.n(5)
	}
	return s
}

// placement is a random placement of a tensor of the given rank: per axis
// B, a split of any dim (uneven ones included), or, for floats, P or
// P(max) — one kind of partial per placement (mixing them is an error).
func (g *gen) placement(rank int, float bool) string {
	partial := "P"
	if g.c.pct(30) {
		partial = "P(max)"
	}
	var parts []string
	for range g.axes {
		k := g.c.n(rank + 3)
		switch {
		case k < rank:
			parts = append(parts, fmt.Sprintf("S(%d)", k))
		case k == rank && float:
			parts = append(parts, partial)
		default:
			parts = append(parts, "B")
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func (g *gen) fresh() string {
	g.next++
	return fmt.Sprintf("v%d", g.next)
}

func shapeText(s []int) string {
	var parts []string
	for _, d := range s {
		parts = append(parts, fmt.Sprint(d))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// input declares a float input; its values are tame (normal(0, 1)).
func (g *gen) input(dt string, shape []int) value {
	v := value{name: g.fresh(), dt: dt, shape: shape}
	g.lines = append(g.lines, fmt.Sprintf("input %s : %s%s %s = normal(0, 1)", v.name, dt, shapeText(shape), g.placement(len(shape), true)))
	g.vals = append(g.vals, v)
	g.inputs = append(g.inputs, v)
	return v
}

// intInput declares an integer input with values in [0, hi).
func (g *gen) intInput(shape []int, hi int) string {
	name := g.fresh()
	g.lines = append(g.lines, fmt.Sprintf("input %s : i64%s %s = uniform(0, %d)", name, shapeText(shape), g.placement(len(shape), false), hi))
	return name
}

// assign names an expression, keeps it for later ops, and may output it.
func (g *gen) assign(expr, dt string, shape []int) {
	v := value{name: g.fresh(), dt: dt, shape: shape}
	g.lines = append(g.lines, v.name+" = "+expr)
	g.vals = append(g.vals, v)
	if g.c.pct(40) {
		g.output(v)
	}
}

func (g *gen) output(v value) {
	g.isOut[v.name] = true
	if g.c.pct(30) {
		g.lines = append(g.lines, "output "+v.name+" "+g.placement(v.rank(), true))
		return
	}
	g.lines = append(g.lines, "output "+v.name)
}

func (g *gen) pick() value { return g.vals[g.c.n(len(g.vals))] }

// like returns a value of v's dtype whose shape broadcasts against v's:
// v itself, or a new input of v's shape, a suffix of it, or with size-1
// dims.
func (g *gen) like(v value) value {
	switch g.c.n(4) {
	case 0:
		return v
	case 1:
		return g.input(v.dt, v.shape[g.c.n(v.rank()+1):])
	case 2:
		s := append([]int(nil), v.shape...)
		for i := range s {
			if g.c.pct(50) {
				s[i] = 1
			}
		}
		return g.input(v.dt, s)
	}
	for _, w := range g.vals {
		if w.dt == v.dt && w.name != v.name && equal(w.shape, v.shape) {
			return w
		}
	}
	return g.input(v.dt, v.shape)
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func broadcast(a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := range out {
		x, y := 1, 1
		if j := i - n + len(a); j >= 0 {
			x = a[j]
		}
		if j := i - n + len(b); j >= 0 {
			y = b[j]
		}
		out[i] = max(x, y)
	}
	return out
}
