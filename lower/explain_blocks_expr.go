package lower

import (
	"fmt"
	"slices"
	"strings"
)

// Symbolic blocks for `explain --blocks`. A device's local value is named
// by what it is made of: the blocks of the global arguments it holds
// (X[1,0]: row block 1, column block 0), their sums, matrix products,
// concatenations and pieces. The rules are the algebra a student applies
// by hand, so the label of a SUMMA result reads X[0,0]·W[0,0] +
// X[0,1]·W[1,0]; anything the algebra does not simplify keeps a short
// derived name with the blocks it was computed from.

type exprKind int

const (
	eZero   exprKind = iota
	eNum             // a number: text
	eAtom            // a block of a global tensor: name, idx, nb
	eSum             // args added
	eProd            // args matrix-multiplied, in order
	eCat             // args concatenated along dim
	ePiece           // piece k of n of args[0] along dim
	eFn              // op(args): text is the op, or an infix symbol
	eOpaque          // a collapsed derivation: text, and the atoms it used
)

type expr struct {
	kind exprKind
	text string
	// atoms: per tensor dim, the block indices held, in order (nil or a
	// list covering all nb blocks means the whole dim); nb is the number
	// of blocks that dim is cut into, base the number the boundary cut it
	// into (a reduce-scatter may cut a block further: nb = base·f, and
	// index x is piece x mod f of block x / f, written 0₁)
	idx   [][]int
	nb    []int
	base  []int
	trans bool   // an atom transposed (its last two dims)
	part  string // an atom that is one device's partial sum: "r=1"
	args  []*expr
	dim   int
	k, n  int
	infix bool
	// opaque: the device it was computed on ("@(0,1)"), and whether it
	// is rendered inside another label (then by name and device only)
	from   string
	nested bool
}

var zero = &expr{kind: eZero}

func num(s string) *expr {
	if s == "0" {
		return zero
	}
	return &expr{kind: eNum, text: s}
}

// sum adds terms, flattening nested sums and dropping zeros.
func sum(terms ...*expr) *expr {
	var out []*expr
	for _, t := range terms {
		switch t.kind {
		case eZero:
		case eSum:
			out = append(out, t.args...)
		default:
			out = append(out, t)
		}
	}
	switch len(out) {
	case 0:
		return zero
	case 1:
		return out[0]
	}
	return &expr{kind: eSum, args: out}
}

// prod is a matrix product: zero if a factor is, flattened, and
// distributed over a sum on the left or right (so a SUMMA step's terms
// stay separate when they are later summed).
func prod(a, b *expr) *expr {
	if a.kind == eZero || b.kind == eZero {
		return zero
	}
	var fs []*expr
	for _, x := range []*expr{a, b} {
		if x.kind == eProd {
			fs = append(fs, x.args...)
		} else {
			fs = append(fs, x)
		}
	}
	return &expr{kind: eProd, args: fs}
}

// cat concatenates along dim; atoms of one tensor that differ only along
// dim merge into one atom listing the blocks (X[{0,2},1]).
func cat(dim int, parts []*expr) *expr {
	if len(parts) == 1 {
		return parts[0]
	}
	a := parts[0]
	merged := a.kind == eAtom && !a.trans && a.part == "" && dim < len(a.idx)
	for _, p := range parts[1:] {
		if !merged || p.kind != eAtom || p.trans || p.part != "" || p.text != a.text || !sameExcept(a, p, dim) {
			merged = false
			break
		}
	}
	if !merged {
		return &expr{kind: eCat, dim: dim, args: slices.Clone(parts)}
	}
	m := *a
	m.idx = slices.Clone(a.idx)
	m.idx[dim] = nil
	for _, p := range parts {
		m.idx[dim] = append(m.idx[dim], p.blocks(dim)...)
	}
	return &m
}

func sameExcept(a, b *expr, dim int) bool {
	if !slices.Equal(a.nb, b.nb) {
		return false
	}
	for d := range a.idx {
		if d != dim && !slices.Equal(a.blocks(d), b.blocks(d)) {
			return false
		}
	}
	return true
}

// blocks lists the blocks an atom holds along d (all of them when idx is nil).
func (e *expr) blocks(d int) []int {
	if e.idx[d] != nil {
		return e.idx[d]
	}
	out := make([]int, e.nb[d])
	for i := range out {
		out[i] = i
	}
	return out
}

// piece is piece k of n along dim (what reduce_scatter keeps): a sum's
// pieces are summed, a product's rows come from its first factor and its
// columns from its last, a concatenation or a multi-block atom keeps its
// k-th share of parts.
func piece(e *expr, dim, rank, k, n int) *expr {
	switch e.kind {
	case eZero:
		return zero
	case eSum:
		out := make([]*expr, len(e.args))
		for i, t := range e.args {
			out[i] = piece(t, dim, rank, k, n)
		}
		return sum(out...)
	case eProd:
		fs := slices.Clone(e.args)
		switch {
		case rank >= 2 && dim == rank-2:
			fs[0] = piece(fs[0], dim, rank, k, n)
		case rank >= 2 && dim == rank-1:
			fs[len(fs)-1] = piece(fs[len(fs)-1], dim, rank, k, n)
		default:
			return &expr{kind: ePiece, dim: dim, k: k, n: n, args: []*expr{e}}
		}
		if fs[0].kind == ePiece || fs[len(fs)-1].kind == ePiece {
			return &expr{kind: ePiece, dim: dim, k: k, n: n, args: []*expr{e}}
		}
		return &expr{kind: eProd, args: fs}
	case eCat:
		if e.dim == dim && len(e.args)%n == 0 {
			s := len(e.args) / n
			return cat(dim, e.args[k*s:(k+1)*s])
		}
	case eAtom:
		d := dim
		if e.trans && rank >= 2 && dim >= rank-2 {
			d = 2*rank - 3 - dim // the other of the last two dims
		}
		a := *e
		a.idx, a.nb = slices.Clone(e.idx), slices.Clone(e.nb)
		switch b := e.blocks(d); {
		case len(b) > 1 && len(b)%n == 0:
			s := len(b) / n
			a.idx[d] = slices.Clone(b[k*s : (k+1)*s])
			return &a
		case len(b) == 1:
			// one block: cut it into n pieces
			a.nb[d], a.idx[d] = e.nb[d]*n, []int{b[0]*n + k}
			return &a
		}
	}
	return &expr{kind: ePiece, dim: dim, k: k, n: n, args: []*expr{e}}
}

// transpose swaps the last two dims: atoms are marked, a product reverses
// its factors, sums and concatenations transpose term by term.
func transpose(e *expr, rank int) *expr {
	switch e.kind {
	case eZero, eNum:
		return e
	case eAtom:
		a := *e
		a.trans = !a.trans
		return &a
	case eSum:
		out := make([]*expr, len(e.args))
		for i, t := range e.args {
			out[i] = transpose(t, rank)
		}
		return sum(out...)
	case eProd:
		out := make([]*expr, len(e.args))
		for i, t := range e.args {
			out[len(e.args)-1-i] = transpose(t, rank)
		}
		return &expr{kind: eProd, args: out}
	case eCat:
		if rank >= 2 && e.dim >= rank-2 {
			out := make([]*expr, len(e.args))
			for i, t := range e.args {
				out[i] = transpose(t, rank)
			}
			return &expr{kind: eCat, dim: 2*rank - 3 - e.dim, args: out}
		}
	}
	return &expr{kind: eFn, text: "ᵀ", args: []*expr{e}}
}

// Labels longer than these collapse into a derived name and the blocks
// used: a ring attention's running output would otherwise spell its
// whole history.
const (
	maxFnLabel  = 48
	maxAnyLabel = 120
)

// collapse replaces a long derivation by name⟨blocks it used⟩; from
// names the device that computed it.
func collapse(e *expr, name, from string) *expr {
	if algebraic(e) {
		return e // sums and products of blocks keep their terms; String shortens them
	}
	s := e.String()
	n := len([]rune(s))
	short := n <= maxFnLabel || e.kind == eSum || e.kind == eProd || e.kind == eCat || e.kind == eAtom
	if n <= maxAnyLabel && short && !hasOpaque(e) {
		return e
	}
	return &expr{kind: eOpaque, text: name, from: from, args: atomsOf(e)}
}

// algebraic reports whether e is blocks and numbers joined by sums,
// products, concatenations and pieces only.
func algebraic(e *expr) bool {
	switch e.kind {
	case eAtom, eZero, eNum:
		return true
	case eSum, eProd, eCat, ePiece:
		for _, a := range e.args {
			if !algebraic(a) {
				return false
			}
		}
		return true
	}
	return false
}

// hasOpaque reports whether a derived label uses a collapsed one (it is
// then collapsed too: a name and the blocks it used say more than a
// formula over names).
func hasOpaque(e *expr) bool {
	if e.kind == eAtom {
		return false
	}
	for _, a := range e.args {
		if a.kind == eOpaque || hasOpaque(a) {
			return true
		}
	}
	return false
}

// inner is e as an argument of another label: an opaque one shows only
// its name and device.
func inner(e *expr) *expr {
	if e.kind != eOpaque || e.nested {
		return e
	}
	c := *e
	c.nested = true
	return &c
}

// atomsOf lists the distinct atoms (and opaque names' atoms) e uses, sorted.
func atomsOf(e *expr) []*expr {
	seen := map[string]*expr{}
	var walk func(x *expr)
	walk = func(x *expr) {
		switch x.kind {
		case eAtom:
			seen[x.String()] = x
		default:
			for _, a := range x.args {
				walk(a)
			}
		}
	}
	walk(e)
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*expr, len(keys))
	for i, k := range keys {
		out[i] = seen[k]
	}
	return out
}

// String renders the label: sums with +, products with ·, transposes
// with ᵀ, merged blocks as {0,2} and a whole dim as ':'.
func (e *expr) String() string {
	switch e.kind {
	case eZero:
		return "0"
	case eNum:
		return e.text
	case eAtom:
		return e.atomString()
	case eSum:
		s := countTerms(e.args)
		if len([]rune(s)) > maxAnyLabel {
			if sg, ok := e.sigma(); ok {
				return sg
			}
			return abbreviate(e.args, " + ", eSum)
		}
		return s
	case eProd:
		return joinExprs(e.args, "·", eProd)
	case eCat:
		return fmt.Sprintf("cat(%s; dim %d)", abbreviate(e.args, ", ", eCat), e.dim)
	case ePiece:
		x := e.args[0].String()
		if k := e.args[0].kind; k != eAtom && k != eOpaque {
			x = "(" + x + ")"
		}
		return fmt.Sprintf("piece %d/%d along dim %d of %s", e.k, e.n, e.dim, x)
	case eOpaque:
		if e.nested || len(e.args) == 0 {
			return e.text + e.from
		}
		const most = 8
		parts := make([]string, 0, most+1)
		for i, a := range e.args {
			if i == most {
				parts = append(parts, fmt.Sprintf("… %d more", len(e.args)-most))
				break
			}
			parts = append(parts, a.String())
		}
		return e.text + "⟨" + strings.Join(parts, ", ") + "⟩"
	case eFn:
		if e.text == "ᵀ" {
			return "(" + e.args[0].String() + ")ᵀ"
		}
		if e.infix && len(e.args) == 2 {
			return wrap(e.args[0], eFn) + " " + e.text + " " + wrap(e.args[1], eFn)
		}
		return e.text + "(" + joinExprs(e.args, ", ", eCat) + ")"
	}
	return "?"
}

func (e *expr) atomString() string {
	s := e.text
	split := false
	for _, n := range e.nb {
		split = split || n > 1
	}
	if split {
		parts := make([]string, len(e.idx))
		for d := range e.idx {
			b := e.blocks(d)
			switch {
			case wholeDim(b, e.nb[d]):
				parts[d] = ":"
			case len(b) == 1:
				parts[d] = e.index(d, b[0])
			default:
				ss := make([]string, len(b))
				for i, x := range b {
					ss[i] = e.index(d, x)
				}
				parts[d] = "{" + strings.Join(ss, ",") + "}"
			}
		}
		s += "[" + strings.Join(parts, ",") + "]"
	}
	if e.part != "" {
		s += "(part " + e.part + ")"
	}
	if e.trans {
		s += "ᵀ"
	}
	return s
}

// joinExprs renders args joined by sep, bracketing those that bind less
// tightly than the enclosing kind.
func joinExprs(args []*expr, sep string, in exprKind) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = wrap(a, in)
	}
	return strings.Join(parts, sep)
}

func wrap(a *expr, in exprKind) string {
	s := a.String()
	if (a.kind == eSum && in != eSum && in != eCat) || (a.kind == eFn && a.infix && in != eCat) {
		return "(" + s + ")"
	}
	return s
}

// wholeDim reports whether blocks are 0, 1, …, nb-1 in order.
func wholeDim(b []int, nb int) bool {
	if len(b) != nb {
		return false
	}
	for i, x := range b {
		if x != i {
			return false
		}
	}
	return true
}

// index writes block x of dim d: a piece of a boundary block as the
// block with the piece's number below it (0₁: piece 1 of block 0); a dim
// the boundary left whole is numbered by its pieces.
func (e *expr) index(d, x int) string {
	if x == sigmaIndex {
		return "t"
	}
	base := e.nb[d]
	if e.base != nil {
		base = e.base[d]
	}
	f := e.nb[d] / base
	if f <= 1 || base == 1 {
		return fmt.Sprint(x)
	}
	sub := strings.Map(func(r rune) rune { return '₀' + r - '0' }, fmt.Sprint(x%f))
	return fmt.Sprint(x/f) + sub
}

// countTerms writes a sum's terms, equal ones once with their count
// (6·X[0,0]: six devices' copies of one block summed), in order of first
// appearance.
func countTerms(args []*expr) string {
	var order []string
	count := map[string]int{}
	for _, a := range args {
		s := wrap(a, eSum)
		if count[s] == 0 {
			order = append(order, s)
		}
		count[s]++
	}
	for i, s := range order {
		if n := count[s]; n > 1 {
			order[i] = fmt.Sprintf("%d·%s", n, s)
		}
	}
	return strings.Join(order, " + ")
}
