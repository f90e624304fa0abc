// Package gptsrc writes a GPT-like meshrun program of a given number of
// layers, for timing how lowering and `meshrun explain` scale with layers
// and devices (issue 10, goal 4). Each layer has its own parameters with
// Megatron tensor-parallel placements, as in examples/train/gpt/gpt_3d.mesh;
// the sizes are fixed because explain's cost depends on the number of
// values and ranks, not on the tensors' extents.
package gptsrc

import (
	"fmt"
	"io"
	"strings"
)

const (
	width  = 256  // model width
	heads  = 8    // attention heads: tp=8 splits one head per device
	ffn    = 1024 // hidden units of the MLP
	seq    = 64   // tokens per sequence
	vocab  = 512  // divisible by tp for the output projection
	batch  = 512  // rows per step: dp=512 without a pipeline, dp=64 × 8 micro-batches with one
	micros = 8
)

// write prints the whole program; mb is the batch one forward sees (a
// micro-batch with a pipeline), which the head reshapes must name.
func Write(w io.Writer, layers int, pipelined bool) {
	mb := batch
	if pipelined {
		mb = batch / micros
		fmt.Fprintln(w, "mesh M = [dp=64, pipeline pp=8, tp=8]")
	} else {
		fmt.Fprintln(w, "mesh M = [dp=512, tp=8]")
	}
	fmt.Fprintf(w, "\ninput tok  : i64[%d, %d] {S(0), B} = uniform(0, %d)\n", batch, seq, vocab)
	fmt.Fprintf(w, "input tgt  : i64[%d, %d] {S(0), B} = uniform(0, %d)\n", batch, seq, vocab)
	fmt.Fprintf(w, "input mask : f32[%d, %d] = causal\n\n", seq, seq)
	fmt.Fprintf(w, "param wte : f32[%d, %d] {B, B} = normal(0, 0.02)\n", vocab, width)
	fmt.Fprintf(w, "param wpe : f32[%d, %d] {B, B} = normal(0, 0.01)\n", seq, width)
	for l := 0; l < layers; l++ {
		layerParams(w, l)
	}
	fmt.Fprintf(w, "param gf : f32[%d] {B, B} = ones\n", width)
	fmt.Fprintf(w, "param bf : f32[%d] {B, B} = zeros\n", width)
	fmt.Fprintf(w, "param Wout : f32[%d, %d] {B, S(1)} = normal(0, 0.02)\n\n", width, vocab)
	funcs(w, mb)
	trainBlock(w, layers, mb, pipelined)
}

func layerParams(w io.Writer, l int) {
	for _, n := range []string{"Wq", "Wk", "Wv"} {
		fmt.Fprintf(w, "param %s%d : f32[%d, %d] {B, S(1)} = normal(0, 0.02)\n", n, l, width, width)
	}
	fmt.Fprintf(w, "param Wo%d : f32[%d, %d] {B, S(0)} = normal(0, 0.02)\n", l, width, width)
	fmt.Fprintf(w, "param W1%d : f32[%d, %d] {B, S(1)} = normal(0, 0.02)\n", l, width, ffn)
	fmt.Fprintf(w, "param W2%d : f32[%d, %d] {B, S(0)} = normal(0, 0.02)\n", l, ffn, width)
	for _, n := range []string{"ga", "gm"} {
		fmt.Fprintf(w, "param %s%d : f32[%d] {B, B} = ones\n", n, l, width)
	}
	for _, n := range []string{"ba", "bm"} {
		fmt.Fprintf(w, "param %s%d : f32[%d] {B, B} = zeros\n", n, l, width)
	}
}

func funcs(w io.Writer, mb int) {
	hd := width / heads
	fmt.Fprintf(w, `def heads(t) {
    return permute(reshape(t, %d, %d, %d, %d), 0, 2, 1, 3)
}
def merge(t) {
    return reshape(permute(t, 0, 2, 1, 3), %d, %d, %d)
}
def attention(x, Wq, Wk, Wv, Wo) {
    q = heads(x @ Wq)
    k = heads(x @ Wk)
    v = heads(x @ Wv)
    s = (q @ transpose(k)) * 0.125 + mask
    return merge(softmax(s, axis=-1) @ v) @ Wo
}
def block(x, ga, ba, Wq, Wk, Wv, Wo, gm, bm, W1, W2) {
    h = x + attention(layernorm(x, ga, ba), Wq, Wk, Wv, Wo)
    return h + gelu(layernorm(h, gm, bm) @ W1) @ W2
}

`, mb, seq, heads, hd, mb, seq, width)
}

func trainBlock(w io.Writer, layers, mb int, pipelined bool) {
	fmt.Fprintln(w, "train {")
	fmt.Fprintln(w, "    x = embedding(wte, tok) + wpe")
	for l := 0; l < layers; l++ {
		args := []string{"x"}
		for _, n := range []string{"ga", "ba", "Wq", "Wk", "Wv", "Wo", "gm", "bm", "W1", "W2"} {
			args = append(args, fmt.Sprintf("%s%d", n, l))
		}
		fmt.Fprintf(w, "    x = block(%s)\n", strings.Join(args, ", "))
	}
	fmt.Fprintln(w, "    logits = layernorm(x, gf, bf) @ Wout")
	fmt.Fprintf(w, "    loss = cross_entropy(reshape(logits, %d, %d), reshape(tgt, %d))\n", mb*seq, vocab, mb*seq)
	fmt.Fprintln(w, "    optimizer = adam(lr=0.001)")
	if pipelined {
		fmt.Fprintln(w, "    pipeline = 1f1b")
		fmt.Fprintf(w, "    microbatches = %d\n", micros)
	}
	fmt.Fprintf(w, "    batch = %d\n    steps = 1\n}\n", batch)
}
