package planner

import (
	"bytes"
	"slices"
)

// Folding: a program whose train block repeats a statement (a GPT's
// `x = block(x, Wq7, …)` for each layer) is priced from a copy that keeps
// three of each run of repeats (fold.go), checked and lowered once per
// strategy class instead of once per candidate (compose.go).
//
// Two train-block statements repeat each other when their text is equal
// once every parameter they name is replaced by its declaration without
// the name (type, placement, initialiser): they compute the same thing
// on parameters declared alike. A run is three or more consecutive such
// statements no two of which read the same parameter, named or through
// the function they call (tied weights are not repeats: see namesAny).
// The fold keeps a run's first, second and last, and drops the others
// (which the second stands for) with the declarations of the parameters
// only they use. The ends are kept because they may be placed otherwise
// than the middle: the first sees the embedding's output, not a block's,
// and the last feeds the head, whose backward may ask for its
// activations in another placement (the GPT of the planner's tests on
// [tp=2, pp=8] composed 4% high when the second stood for the last too).
// A run is folded only when it has more than three statements. A
// program with a for loop, `stage =` marks or no run is
// not folded. (A loop's layers share stacked parameters, [L, …], which
// live on the first stage that reads them: under a pipeline every
// layer's gradient slice travels back to that stage, a cost that grows
// with L and that no folded copy shows — the six-layer version of the
// shipped GPT composes 18% low on 8 pipeline stages.)

// trainStmt is a statement of the train block.
type trainStmt struct {
	span
	unit bool     // a unit (computes), not a setting
	ids  []string // identifiers, in order
}

// foldPlan is how a program folds: the runs found, and for each unit of
// the original program the unit of the folded one that stands for it.
type foldPlan struct {
	Source []byte
	// Unit maps each of the program's units to the folded program's unit
	// with the same computation; Units is the folded program's unit count.
	Unit  []int
	Units int
	// Runs are the repeated units of the folded program (the middle one
	// kept of each run) and how many original units each stands for.
	Runs []foldRun
}

type foldRun struct{ Unit, Count int }

// fold builds the folded program, keeping keep ≥ 3 statements of each
// run: its first keep-1 and its last (pricing keeps 3; the extrapolation
// of a run also lowers keep = 4). nil when the program does not fold.
func (p *Program) fold(keep int) *foldPlan {
	if p.noFold || len(p.stmts) == 0 {
		return nil
	}
	canon := make([]string, len(p.stmts))
	for i, s := range p.stmts {
		if s.unit {
			canon[i] = p.canonical(s)
		}
	}
	drop := make([]bool, len(p.stmts))
	fp := &foldPlan{}
	unit := 0 // index among the folded program's units
	for i := 0; i < len(p.stmts); {
		if !p.stmts[i].unit {
			i++
			continue
		}
		j := i + 1
		named := p.paramsOf(p.stmts[i], nil)
		for j < len(p.stmts) && p.stmts[j].unit && canon[j] == canon[i] && !p.namesAny(p.stmts[j], named) {
			named = p.paramsOf(p.stmts[j], named)
			j++
		}
		n := j - i
		if n < 3 || n <= keep {
			for range n {
				fp.Unit = append(fp.Unit, unit)
				unit++
			}
			i = j
			continue
		}
		// kept: the run's first keep-1 statements and its last; the
		// dropped ones are the middle ones, like the last of the first
		for k := range n {
			switch {
			case k < keep-1:
				fp.Unit = append(fp.Unit, unit+k)
			case k == n-1:
				fp.Unit = append(fp.Unit, unit+keep-1)
			default:
				fp.Unit = append(fp.Unit, unit+keep-2)
				drop[i+k] = true
			}
		}
		fp.Runs = append(fp.Runs, foldRun{Unit: unit + keep - 2, Count: n - keep + 1})
		unit += keep
		i = j
	}
	if len(fp.Runs) == 0 {
		return nil
	}
	fp.Units = unit
	fp.Source = p.dropStatements(drop)
	return fp
}

// paramsOf adds the parameters s reads to into (made when nil): those it
// names and those the functions it calls name, through their calls (a
// global parameter a function reads is read by every call of it).
func (p *Program) paramsOf(s trainStmt, into map[string]bool) map[string]bool {
	if into == nil {
		into = map[string]bool{}
	}
	seen := map[string]bool{}
	var walk func(ids []string)
	walk = func(ids []string) {
		for _, id := range ids {
			if _, ok := p.paramSig[id]; ok {
				into[id] = true
			}
			if body, ok := p.defIDs[id]; ok && !seen[id] {
				seen[id] = true
				walk(body)
			}
		}
	}
	walk(s.ids)
	return into
}

// namesAny says whether s reads a parameter of set: statements that share
// a parameter (weights tied across layers, named or read by the function
// they call) are not repeats, since the shared parameter lives on one
// pipeline stage and its gradient gathers there from every stage that
// reads it, a cost no folded copy shows (composed 17% and 13% low on 8
// stages: TestFoldSharedParametersNotRepeats).
func (p *Program) namesAny(s trainStmt, set map[string]bool) bool {
	for id := range p.paramsOf(s, nil) {
		if set[id] {
			return true
		}
	}
	return false
}

// canonical is a statement's text with each parameter it names replaced
// by the parameter's declaration without its name, blanks and comments
// dropped.
func (p *Program) canonical(s trainStmt) string {
	var b bytes.Buffer
	scanSource(p.Src[s.start:s.end], func(id []byte) {
		if sig, ok := p.paramSig[string(id)]; ok {
			b.WriteString("\x00" + sig + "\x00")
		} else {
			b.Write(id)
		}
	}, func(c byte) {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			b.WriteByte(c)
		}
	})
	return b.String()
}

// dropStatements is the source without the dropped statements and the
// declarations of parameters that only they name.
func (p *Program) dropStatements(drop []bool) []byte {
	used := map[string]bool{}
	for i, s := range p.stmts {
		if !drop[i] {
			for _, id := range s.ids {
				used[id] = true
			}
		}
	}
	var cuts []span
	for i, s := range p.stmts {
		if drop[i] {
			cuts = append(cuts, s.span)
		}
	}
	for name, sp := range p.paramDecl {
		if !used[name] && p.usedOutsideTrain[name] == 0 {
			cuts = append(cuts, sp)
		}
	}
	slices.SortFunc(cuts, func(a, b span) int { return a.start - b.start })
	var out bytes.Buffer
	at := 0
	for _, c := range cuts {
		out.Write(p.Src[at:c.start])
		at = c.end
	}
	out.Write(p.Src[at:])
	return out.Bytes()
}

// identifiers lists the identifiers of a piece of source, skipping
// comments, strings and numbers.
func identifiers(text []byte) []string {
	var out []string
	scanSource(text, func(id []byte) { out = append(out, string(id)) }, func(byte) {})
	return out
}

// scanSource walks a piece of source: each identifier to ident, every
// other byte (of strings and numbers too) to other; comments skipped.
func scanSource(text []byte, ident func([]byte), other func(byte)) {
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '#':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '"':
			j := i + 1
			for j < len(text) && text[j] != '"' {
				j++
			}
			for ; i <= j && i < len(text); i++ {
				other(text[i])
			}
		case isIdent(c):
			j := i
			for j < len(text) && isIdent(text[j]) {
				j++
			}
			if c >= '0' && c <= '9' {
				for ; i < j; i++ {
					other(text[i])
				}
			} else {
				ident(text[i:j])
			}
			i = j
		default:
			other(c)
			i++
		}
	}
}
