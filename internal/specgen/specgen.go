// Package specgen generates the parts of spec.md that must never drift
// from the code: the grammar (from the parser), the one-axis placement
// rules of every op (from the rule tables in package sbp) and the boxing
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
	"github.com/meshrun/meshrun/sbp"
)

// Sections returns the generated text of every marked section.
func Sections() map[string]string {
	return map[string]string{
		"grammar": "```ebnf\n" + lang.Grammar() + "\n```\n",
		"rules":   Rules(),
		"boxing":  Boxing(),
	}
}

// ruleExample is an op with representative shapes.
type ruleExample struct {
	op   string
	form string
	d    sbp.OpDesc
}

var ruleExamples = []ruleExample{
	{"matmul", "Y[m,n] = A[m,k] @ B[k,n]", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}},
	{"matmul", "Y[b,m,n] = A[b,m,k] @ B[k,n]", sbp.OpDesc{In: [][]int{{4, 4, 4}, {4, 4}}, Out: []int{4, 4, 4}}},
	{"add", "Y[m,n] = A[m,n] + B[n] (also sub)", sbp.OpDesc{In: [][]int{{4, 4}, {4}}, Out: []int{4, 4}}},
	{"mul", "Y[m,n] = A[m,n] * B[m,n]", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}},
	{"div", "Y[m,n] = A[m,n] / B[m,n]", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}},
	{"minimum", "Y[m,n] = minimum(A[m,n], B[m,n]) (also maximum)", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}},
	{"neg", "Y[m,n] = -A[m,n]", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}},
	{"exp", "Y = f(A[m,n]) for exp log sqrt tanh relu gelu sigmoid", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}},
	{"softmax", "Y[m,n] = softmax(A[m,n], axis=1) (also log_softmax)", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}, Axis: 1}},
	{"layernorm", "Y[m,n] = layernorm(A[m,n], gamma[n], beta[n])", sbp.OpDesc{In: [][]int{{4, 4}, {4}, {4}}, Out: []int{4, 4}}},
	{"sum", "Y[m] = sum(A[m,n], axis=1) (also mean)", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4}, Axis: 1}},
	{"sum", "Y[] = sum(A[m,n]) (all dims; also mean)", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{}, Axis: -1}},
	{"max", "Y[m] = max(A[m,n], axis=1)", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4}, Axis: 1}},
	{"nonfinite", "Y[] = nonfinite(A[m,n])", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{}, Axis: -1}},
	{"where", "Y[m,n] = where(C[m,1], A[m,n], B[n])", sbp.OpDesc{In: [][]int{{4, 1}, {4, 4}, {4}}, Out: []int{4, 4}}},
	{"transpose", "Y[n,m] = transpose(A[m,n])", sbp.OpDesc{In: [][]int{{4, 6}}, Out: []int{6, 4}, Perm: []int{1, 0}}},
	{"reshape", "Y[a,b,n] = reshape(A[a·b,n], a, b, n)", sbp.OpDesc{In: [][]int{{8, 4}}, Out: []int{2, 4, 4}}},
	{"concat", "Y[m1+m2,n] = concat(A[m1,n], B[m2,n], axis=0)", sbp.OpDesc{In: [][]int{{4, 4}, {2, 4}}, Out: []int{6, 4}, Axis: 0}},
	{"slice", "Y[m,j-i] = slice(A[m,n], 1, i, j)", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 2}, Axis: 1}},
	{"embedding", "Y[t,h] = embedding(W[v,h], idx[t])", sbp.OpDesc{In: [][]int{{8, 4}, {4}}, Out: []int{4, 4}}},
	{"cross_entropy", "Y[] = cross_entropy(logits[n,c], labels[n])", sbp.OpDesc{In: [][]int{{4, 4}, {4}}, Out: []int{}}},
	{"mse", "Y[] = mse(A[m,n], B[m,n])", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{}}},
	{"const", "a number used as a tensor", sbp.OpDesc{Out: []int{}}},
	{"adam_update", "P'[m,n] = adam_update(P, M, V, step, root_bc2, eps, decay) (also adam_moment, adam_moment2)", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}, {4, 4}, {}, {}, {}, {}}, Out: []int{4, 4}}},
	{"relu_grad", "Y = relu_grad(A[m,n]) (also gelu_grad)", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}},
	{"softmax_grad", "D[m,n] = softmax_grad(Y[m,n], G[m,n], axis=1)", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}, Axis: 1}},
	{"normalize", "Y[m,n] = normalize(A[m,n])", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}},
	{"normalize_grad", "D[m,n] = normalize_grad(X[m,n], G[m,n])", sbp.OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}},
	{"max_grad", "D[m,n] = max_grad(X[m,n], Y[m], G[m], 1)", sbp.OpDesc{In: [][]int{{4, 4}, {4}, {4}}, Out: []int{4, 4}, Axis: 1}},
	{"broadcast_to", "Y[m,n] = broadcast_to(A[m,1], m, n)", sbp.OpDesc{In: [][]int{{4, 1}}, Out: []int{4, 4}}},
	{"pad", "Y[m,n+i+j] = pad(A[m,n], 1, i, j)", sbp.OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 7}, Axis: 1}},
	{"embedding_grad", "D[v,h] = embedding_grad(idx[t], G[t,h], v)", sbp.OpDesc{In: [][]int{{4}, {4, 4}}, Out: []int{8, 4}}},
	{"cross_entropy_grad", "D[n,c] = cross_entropy_grad(logits[n,c], labels[n], g[])", sbp.OpDesc{In: [][]int{{4, 4}, {4}, {}}, Out: []int{4, 4}}},
}

// Rules renders every op's one-axis signatures.
func Rules() string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, ex := range ruleExamples {
		seen[ex.op] = true
		r, ok := sbp.Lookup(ex.op)
		if !ok {
			panic("specgen: no rule for " + ex.op)
		}
		d := ex.d
		d.Op = ex.op
		fmt.Fprintf(&b, "**%s** — `%s` (family %s)\n\n", ex.op, ex.form, r.Family)
		b.WriteString("| inputs | output | why |\n|---|---|---|\n")
		for _, s := range r.Sigs(&d) {
			var ins []string
			for _, x := range s.In {
				ins = append(ins, x.String())
			}
			in := strings.Join(ins, ", ")
			if in == "" {
				in = "—"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", in, s.Out, s.Why)
		}
		b.WriteString("\n")
	}
	var missing []string
	for _, op := range sbp.Ops() {
		if !seen[op] && !coveredBy(op) {
			missing = append(missing, op)
		}
	}
	if len(missing) > 0 {
		panic("specgen: ops without an example in spec.md: " + strings.Join(missing, ", "))
	}
	return b.String()
}

// coveredBy: ops documented together with another op of the same rule.
func coveredBy(op string) bool {
	switch op {
	case "sub", "log", "sqrt", "tanh", "relu", "gelu", "sigmoid", "log_softmax", "mean", "gelu_grad", "maximum", "cast", "adam_moment", "adam_moment2":
		return true
	}
	return false
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
