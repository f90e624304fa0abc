package rt

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// stdlib/moe.mesh's expert-parallel layer against three references: the
// same program on a mesh whose ep has size 1 (what meshrun check runs), a
// dense global-view program (every token through every expert, the
// routing written again with the compiler placing everything), and a Go
// loop over tokens with counters per expert, in float64 (the values and
// the dropped count). Training: the layer and the dense program end with
// the same parameters. Bytes: what each device sends equals package
// algo's MoE model.

type moeCase struct {
	ep, tokens, experts, hidden, ffn, k, groups int
	cf                                          float64
	drops                                       bool // the capacity turns pairs away
}

func (c moeCase) String() string {
	return fmt.Sprintf("ep%d_T%d_E%d_k%d_G%d_cf%g", c.ep, c.tokens, c.experts, c.k, c.groups, c.cf)
}

// group is the tokens per capacity group; capacity its slots per expert.
func (c moeCase) group() int { return c.tokens / c.groups }
func (c moeCase) capacity() int {
	return algo.MoE{Experts: c.experts, TopK: c.k, CapacityFactor: c.cf}.Capacity(c.group())
}

var moeCases = []moeCase{
	// 12 tokens per device over 8 experts: C = ⌈0.5·12/8⌉ = 1
	{ep: 2, tokens: 24, experts: 8, hidden: 4, ffn: 6, k: 1, groups: 2, cf: 0.5, drops: true},
	{ep: 2, tokens: 24, experts: 8, hidden: 4, ffn: 6, k: 1, groups: 2, cf: 8},
	{ep: 2, tokens: 20, experts: 4, hidden: 4, ffn: 3, k: 2, groups: 2, cf: 1, drops: true},
	{ep: 2, tokens: 20, experts: 4, hidden: 4, ffn: 3, k: 2, groups: 2, cf: 4},
	// two groups per device
	{ep: 2, tokens: 28, experts: 4, hidden: 3, ffn: 4, k: 2, groups: 4, cf: 0.75, drops: true},
	{ep: 4, tokens: 28, experts: 8, hidden: 4, ffn: 4, k: 1, groups: 4, cf: 1, drops: true},
	{ep: 4, tokens: 20, experts: 4, hidden: 3, ffn: 5, k: 2, groups: 4, cf: 0.75, drops: true},
	{ep: 4, tokens: 20, experts: 4, hidden: 3, ffn: 5, k: 2, groups: 4, cf: 4},
}

// decls declares the layer's tensors; kind (input or param) is what the
// tokens, the router and the experts are. The experts and the tokens are
// declared split as the layer takes them, so that their gradients need
// no gathering.
func (c moeCase) decls(kind string) string {
	return fmt.Sprintf(`mesh M = [ep=%d]
use moe
%s X : f32[%d, %d] {ep: S(0)} = normal(0, 1)
%s Wg : f32[%d, %d] = normal(0, 1)
%s W1 : f32[%d, %d, %d] {ep: S(0)} = normal(0, 0.5)
%s W2 : f32[%d, %d, %d] {ep: S(0)} = normal(0, 0.5)
input Tri : f32[%d, %d] = causal
`, c.ep, kind, c.tokens, c.hidden, kind, c.hidden, c.experts, kind, c.experts, c.hidden, c.ffn, kind, c.experts, c.ffn, c.hidden, c.group(), c.group())
}

func (c moeCase) layer() string {
	return fmt.Sprintf("moe.layer(X, Wg, W1, W2, %d, %g, %d)", c.k, c.cf, c.groups)
}

// dense is the global view without local functions, as assignments that
// leave the output in R and the dropped pairs per expert in DR: the top-k
// by max, positions by an inclusive running count (a product with the
// lower triangle made from the causal mask: 1 + mask/1e9), a pair kept
// when its position is at most C, and every expert on every token.
func (c moeCase) dense() string {
	g, s, e, t, h := c.groups, c.group(), c.experts, c.tokens, c.hidden
	var b strings.Builder
	fmt.Fprintf(&b, "    p = softmax(reshape(X, %d, %d, %d) @ Wg, axis=-1)\n", g, s, h)
	fmt.Fprintf(&b, "    low = broadcast_to(1 + Tri / 1e9, %d, %d, %d)\n", g, s, s)
	b.WriteString("    chosen = p * 0\n    kept = p * 0\n    base = p * 0\n")
	for range c.k {
		fmt.Fprintf(&b, "    q = p - 2 * chosen\n    m = where(q - reshape(max(q, axis=2), %d, %d, 1), 0, 1)\n", g, s)
		fmt.Fprintf(&b, "    kj = m * where(relu(low @ m + base - %d), 0, 1)\n", c.capacity())
		fmt.Fprintf(&b, "    base = base + reshape(sum(kj, axis=1), %d, 1, %d)\n", g, e)
		b.WriteString("    chosen = chosen + m\n    kept = kept + kj\n")
	}
	if c.k == 1 {
		b.WriteString("    gate = p * kept\n")
	} else {
		fmt.Fprintf(&b, "    gate = p * kept / reshape(sum(p * chosen, axis=2), %d, %d, 1)\n", g, s)
	}
	fmt.Fprintf(&b, "    gate = reshape(gate, %d, %d)\n    R = X * 0\n", t, e)
	for j := range e {
		fmt.Fprintf(&b, "    R = R + slice(gate, 1, %d, %d) * (gelu(X @ index(W1, %d)) @ index(W2, %d))\n", j, j+1, j, j)
	}
	b.WriteString("    DR = sum(sum(chosen - kept, axis=0), axis=0)\n")
	return b.String()
}

func moeRun(t *testing.T, src string, opts lang.CheckOptions) *Result {
	t.Helper()
	g, err := lang.CheckSource("t.mesh", []byte(src), opts)
	require.NoError(t, err, lang.Render(err, map[string][]byte{"t.mesh": []byte(src)}))
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
	require.NoError(t, err)
	return res
}

func TestMoELayerEqualsReferences(t *testing.T) {
	for _, c := range moeCases {
		t.Run(c.String(), func(t *testing.T) {
			src := c.decls("input") + fmt.Sprintf("Y = %s\nD = moe.dropped(X, Wg, %d, %g, %d)\n", c.layer(), c.k, c.cf, c.groups) +
				c.dense() + "output Y\noutput D\noutput R\noutput DR\noutput X\noutput Wg\noutput W1\noutput W2\n"
			res := moeRun(t, src, lang.CheckOptions{})
			requireSame(t, res, "Y", "R")
			requireSame(t, res, "D", "DR")
			// the same program on a mesh of one device
			one := moeRun(t, src, lang.CheckOptions{SingleDevice: true})
			for _, name := range []string{"Y", "D"} {
				d := CompareWithin(res.Output(name), one.Output(name), DefaultTolerance(ir.F32, c.ep))
				require.True(t, d.OK, "%s on ep=%d vs one device: max abs err %g", name, c.ep, d.MaxAbs)
			}
			// the Go loop
			y, dropped := moeLoop(c, res.Output("X").Float64s(), res.Output("Wg").Float64s(), res.Output("W1").Float64s(), res.Output("W2").Float64s())
			require.InDeltaSlice(t, y, res.Output("Y").Float64s(), 1e-4)
			require.Equal(t, dropped, res.Output("D").Float64s())
			total := 0.0
			for _, n := range dropped {
				total += n
			}
			if c.drops {
				require.Positive(t, total, "the capacity must turn pairs away")
			} else {
				require.Zero(t, total)
			}
		})
	}
}

// TestMoETiesGoToTheFirstExpert: a router of zeros (as a zero-initialised
// one starts) gives every expert the same probability; the top-k are then
// the k lowest experts, as argmax and top-k pick them, and each takes as
// many tokens as fit.
func TestMoETiesGoToTheFirstExpert(t *testing.T) {
	for _, c := range []moeCase{
		{ep: 2, tokens: 12, experts: 4, hidden: 3, ffn: 2, k: 1, groups: 2, cf: 1},
		{ep: 2, tokens: 12, experts: 4, hidden: 3, ffn: 2, k: 2, groups: 2, cf: 1},
	} {
		t.Run(c.String(), func(t *testing.T) {
			src := strings.Replace(c.decls("input"), "Wg : f32[3, 4] = normal(0, 1)", "Wg : f32[3, 4] = zeros", 1) +
				fmt.Sprintf("Y = %s\nD = moe.dropped(X, Wg, %d, %g, %d)\noutput Y\noutput D\noutput X\noutput W1\noutput W2\n", c.layer(), c.k, c.cf, c.groups)
			require.Contains(t, src, "= zeros")
			res := moeRun(t, src, lang.CheckOptions{})
			y, dropped := moeLoop(c, res.Output("X").Float64s(), make([]float64, c.hidden*c.experts), res.Output("W1").Float64s(), res.Output("W2").Float64s())
			require.InDeltaSlice(t, y, res.Output("Y").Float64s(), 1e-4)
			require.Equal(t, dropped, res.Output("D").Float64s())
			// 6 tokens per group, C = ⌈k·6/4⌉: expert 0 (and 1) keep C each
			c0 := c.capacity()
			want := []float64{float64(2 * (6 - c0)), 0, 0, 0}
			if c.k == 2 {
				want[1] = want[0]
			}
			require.Equal(t, want, dropped)
		})
	}
}

// moeLoop is the layer token by token in float64: softmax gates, the k
// best experts (the lower number first among equals), slots handed out
// per group first choices first, in token order, up to the capacity.
func moeLoop(c moeCase, x, wg, w1, w2 []float64) (y, dropped []float64) {
	e, h, f, s := c.experts, c.hidden, c.ffn, c.group()
	y = make([]float64, c.tokens*h)
	dropped = make([]float64, e)
	for g := range c.groups {
		probs := make([][]float64, s)
		picks := make([][]int, s)
		for i := range s {
			row := x[(g*s+i)*h : (g*s+i+1)*h]
			p := make([]float64, e)
			top, sum := math.Inf(-1), 0.0
			for j := range e {
				for l := range h {
					p[j] += row[l] * wg[l*e+j]
				}
				top = math.Max(top, p[j])
			}
			for j := range p {
				p[j] = math.Exp(p[j] - top)
				sum += p[j]
			}
			for j := range p {
				p[j] /= sum
			}
			probs[i] = p
			for range c.k {
				best := -1
				for j := range e {
					if !slices.Contains(picks[i], j) && (best < 0 || p[j] > p[best]) {
						best = j
					}
				}
				picks[i] = append(picks[i], best)
			}
		}
		used := make([]int, e)
		for choice := range c.k {
			for i := range s {
				ex := picks[i][choice]
				if used[ex] == c.capacity() {
					dropped[ex]++
					continue
				}
				used[ex]++
				gate, norm := probs[i][ex], 0.0
				for _, j := range picks[i] {
					norm += probs[i][j]
				}
				if c.k > 1 {
					gate /= norm
				}
				out := moeExpert(x[(g*s+i)*h:(g*s+i+1)*h], w1[ex*h*f:(ex+1)*h*f], w2[ex*f*h:(ex+1)*f*h], f)
				for l := range h {
					y[(g*s+i)*h+l] += gate * out[l]
				}
			}
		}
	}
	return y, dropped
}

// moeExpert is gelu(v @ w1) @ w2 for one token.
func moeExpert(v, w1, w2 []float64, f int) []float64 {
	h := len(v)
	mid := make([]float64, f)
	for j := range f {
		for l := range h {
			mid[j] += v[l] * w1[l*f+j]
		}
		mid[j] = 0.5 * mid[j] * (1 + math.Erf(mid[j]/math.Sqrt2))
	}
	out := make([]float64, h)
	for l := range h {
		for j := range f {
			out[l] += mid[j] * w2[j*h+l]
		}
	}
	return out
}

// moeTrain trains the loss of a body (assignments ending in Y) for three
// steps, on the case's mesh or (single) on its axes of size 1.
func moeTrain(t *testing.T, c moeCase, body string, single ...bool) *TrainResult {
	t.Helper()
	src := c.decls("param") + fmt.Sprintf("input Target : f32[%d, %d] = normal(0, 1)\ntrain {\n%s    loss = mse(Y, Target)\n    optimizer = sgd(lr=0.5)\n    steps = 3\n}\n", c.tokens, c.hidden, body)
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{SingleDevice: len(single) > 0 && single[0]})
	require.NoError(t, err, lang.Render(err, map[string][]byte{"t.mesh": []byte(src)}))
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	r, err := Train(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}}, TrainConfig{})
	require.NoError(t, err)
	return r
}

// TestMoETrainedEqualsDense: three sgd steps with the layer end with the
// same loss curve and parameters as with the dense program, and as with
// the layer on one device.
func TestMoETrainedEqualsDense(t *testing.T) {
	for _, c := range moeCases {
		t.Run(c.String(), func(t *testing.T) {
			a := moeTrain(t, c, "    Y = "+c.layer()+"\n")
			require.Greater(t, a.Losses[0]-a.Losses[len(a.Losses)-1], 1e-4, "the model learns")
			dense := moeTrain(t, c, c.dense()+"    Y = R\n")
			one := moeTrain(t, c, "    Y = "+c.layer()+"\n", true)
			for _, b := range []*TrainResult{dense, one} {
				require.InDeltaSlice(t, b.Losses, a.Losses, 1e-5)
				for i, p := range b.Params {
					got := a.Param(p.Name)
					require.NotNil(t, got, p.Name)
					d := CompareWithin(got, b.Final[i], DefaultTolerance(ir.F32, 8))
					require.True(t, d.OK, "%s: max abs err %g, rel %g", p.Name, d.MaxAbs, d.MaxRel)
				}
			}
			for _, p := range a.Params {
				require.NotEqual(t, a.Param(p.Name).Float64s(), moeTrainInitial(t, c, p.Name), "%s was trained", p.Name)
			}
		})
	}
}

// moeTrainInitial is a param's value before training (a param's initial
// values depend on its name and shape only).
func moeTrainInitial(t *testing.T, c moeCase, name string) []float64 {
	t.Helper()
	return moeRun(t, c.decls("param")+"output "+name+"\n", lang.CheckOptions{}).Output(name).Float64s()
}

// TestMoEBytesEqualAlgo: a forward run sends the two all-to-alls of
// algo's model; a training step (tokens trained too, so the dispatch's
// transpose runs) sends, in the layer's collectives, the model's forward
// and backward, and outside it only the loss's conversions; the parameters
// a device holds are the model's (its experts are 1/ep of them).
func TestMoEBytesEqualAlgo(t *testing.T) {
	for _, c := range moeCases {
		t.Run(c.String(), func(t *testing.T) {
			model := algo.MoE{Tokens: c.tokens, Experts: c.experts, TopK: c.k, CapacityFactor: c.cf, Groups: c.groups, Hidden: c.hidden, FFN: c.ffn, Elem: 4}
			fwd := moeRun(t, c.decls("input")+"Y = "+c.layer()+"\noutput Y\n", lang.CheckOptions{})
			tr := moeTrain(t, c, "    Y = "+c.layer()+"\n")
			// the loss's line in moeTrain's source: the declarations, the
			// target, "train {", the body's one line, then the loss
			lossAt := fmt.Sprintf("t.mesh:%d:", strings.Count(c.decls("param"), "\n")+4)
			for r := range c.ep {
				cost, err := model.Cost(c.ep, nil, r)
				require.NoError(t, err)
				require.Equal(t, cost.Sent(algo.Forward), fwd.Devices[r].BytesSent, "device %d forward", r)
				var layer int64
				kinds := map[string]int{}
				for _, e := range tr.Last.Devices[r].Events {
					switch {
					case e.Kind != "comm":
					case strings.HasPrefix(e.Where, "stdlib/moe.mesh"):
						layer += e.Bytes
						kinds[strings.Split(e.Name, "(")[0]]++
					default:
						// the loss's: its partial value reduced, or Y
						// gathered for it where the cost model prices
						// that lower (lower/infer_ahead.go)
						require.True(t, e.Name == "all_reduce(train.loss)" || strings.HasPrefix(e.Where, lossAt),
							"device %d: a collective outside the layer, %s at %s, is not the loss's (%s)", r, e.Name, e.Where, lossAt)
					}
				}
				require.Equal(t, map[string]int{"all_to_all": 4, "all_reduce": 1}, kinds, "device %d", r)
				require.Equal(t, cost.Sent(algo.Forward)+cost.Sent(algo.Backward), layer, "device %d forward and backward", r)
				// sgd keeps no state: a device holds its tokens (a param
				// here), the router and its E/ep experts
				require.Equal(t, cost.Inputs+cost.Weights, tr.Last.Devices[r].Held, "device %d parameters held", r)
			}
		})
	}
}

// TestMoEBadArguments: arguments the layer cannot take are compile
// errors that say which, at the call or at the library line that checks.
func TestMoEBadArguments(t *testing.T) {
	c := moeCase{ep: 2, tokens: 12, experts: 4, hidden: 3, ffn: 2, k: 2, groups: 2, cf: 1}
	for _, b := range []struct{ call, want string }{
		{"moe.layer(X, Wg, W1, W2, 2, 1, 3)", "moe.mesh:33:9: moe: groups / the size of ep (the groups per device) must be a whole number, not 1.5"},
		{"moe.layer(X, Wg, W1, W2, 2, 1, 8)", "moe.mesh:35:9: moe: the tokens per capacity group (a device's tokens / its groups) must be a whole number, not 1.5"},
		{"moe.dropped(X, Wg, 5, 1, 2)", "moe: 1 / ⌈k / E⌉ (1 when k is at most the E experts) must be a whole number, not 0.5"},
		{"moe.layer(X, Wg, slice(W1, 0, 0, 3), slice(W2, 0, 0, 3), 2, 1, 2)", "t.mesh:8:5: dim 0 of size 3 does not split evenly over ep=2"},
	} {
		src := c.decls("input") + "Y = " + b.call + "\noutput Y\n"
		_, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
		require.ErrorContains(t, err, b.want, b.call)
	}
}
