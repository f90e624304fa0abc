// Package specgen generates the parts of spec.md that must never drift
// from the code: the grammar (from the parser), the one-axis placement
// rules and the op tables (from the registrations in package ops) and the boxing
// table (from sbp.StepKind and the cost formulas). spec.md marks each part
// with <!-- NAME:begin --> and <!-- NAME:end -->; the test in this package
// fails when a part is stale and rewrites them with -update.
package specgen

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/sbp"
)

// Sections returns the generated text of every marked section.
func Sections() map[string]string {
	return map[string]string{
		"grammar": "```ebnf\n" + lang.Grammar() + "\n```\n",
		"rules":   Rules(),
		"boxing":  Boxing(),
		"ops":     OpTable(ops.Forward, lang.BuiltinRows()),
		"helpers": OpTable(ops.Helper, nil),
		"optim":   OpTable(ops.Optim, rowsOf(ops.Fused)),
		"local":   OpTable(ops.LocalView, nil),
	}
}

// kinds orders the op kinds in the rule tables.
var kinds = []ops.Kind{ops.Forward, ops.Optim, ops.Fused, ops.Helper, ops.Tier}

// rowsOf is the op-table rows of a kind's ops (the fused kernels join the
// optimizer table, after the ops they fuse).
func rowsOf(k ops.Kind) []ops.Row {
	var rows []ops.Row
	for _, op := range ops.All() {
		if op.Kind == k {
			rows = append(rows, op.Doc.Rows...)
		}
	}
	return rows
}

// Rules renders every op's one-axis signatures, from the examples each op
// registers (package ops).
func Rules() string {
	var b strings.Builder
	for _, k := range kinds {
		for _, op := range ops.All() {
			if op.Kind != k {
				continue
			}
			for _, ex := range op.Doc.Examples {
				writeRule(&b, op, ex)
			}
		}
	}
	return b.String()
}

func writeRule(b *strings.Builder, op *ops.Op, ex ops.Example) {
	d := ex.Desc
	d.Op = op.Name
	fmt.Fprintf(b, "**%s** — `%s` (family %s)\n\n", op.Name, ex.Form, op.Family)
	b.WriteString("| inputs | output | why |\n|---|---|---|\n")
	for _, s := range op.Placement.Sigs(&d) {
		var ins []string
		for _, x := range s.In {
			ins = append(ins, x.String())
		}
		in := strings.Join(ins, ", ")
		if in == "" {
			in = "—"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", in, s.Out, s.Why)
	}
	b.WriteString("\n")
}

// OpTable renders the op table of a kind: its ops' rows in registration
// order, then extra rows (the forward table ends with the calls that are
// language rather than ops).
func OpTable(k ops.Kind, extra []ops.Row) string {
	var b strings.Builder
	rows := []ops.Row{}
	for _, op := range ops.All() {
		if op.Kind == k {
			rows = append(rows, op.Doc.Rows...)
		}
	}
	rows = append(rows, extra...)
	if k == ops.Forward {
		b.WriteString("| op | shape rule | semantics |\n|---|---|---|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Call, r.Shape, r.Text)
		}
		return b.String()
	}
	b.WriteString("| op | semantics |\n|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r.Call, r.Text)
	}
	return b.String()
}

// Boxing renders the one-axis boxing table.
func Boxing() string {
	var b strings.Builder
	b.WriteString("| from → to | step | cost (bytes per device; time) |\n|---|---|---|\n")
	vals := []sbp.SBP{sbp.S(0), sbp.S(1), sbp.B, sbp.P, sbp.PMax}
	for _, x := range vals {
		for _, y := range vals {
			k, _, ok := sbp.StepKind(x, y)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s → %s | %s | %s |\n", x, y, k, lower.Formula(k))
		}
	}
	b.WriteString("\nPairs not listed (P(sum) ↔ P(max)) have no single step; the planner routes them through B.\n")
	return b.String()
}

// Apply replaces every marked section of doc with its generated text.
func Apply(doc string) (string, error) {
	for name, text := range Sections() {
		re := regexp.MustCompile(`(?s)(<!-- ` + name + `:begin -->\n).*?(<!-- ` + name + `:end -->)`)
		if !re.MatchString(doc) {
			return "", fmt.Errorf("spec.md has no %s section markers", name)
		}
		doc = re.ReplaceAllLiteralString(doc, "<!-- "+name+":begin -->\n"+text+"<!-- "+name+":end -->")
	}
	return doc, nil
}
