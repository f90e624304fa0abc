package lower

import (
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

func lowerFuse(t *testing.T, src string, opts Options) *Plan {
	t.Helper()
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	opts.Verify = true
	p, err := Lower(g, opts)
	require.NoError(t, err)
	return p
}

// fusedOps lists a program's transposes and matmuls as "transpose" and
// "matmul", "matmul Aᵀ", "matmul Bᵀ", "matmul AᵀBᵀ", in order.
func fusedOps(prog *plan.Program) []string {
	var out []string
	for _, in := range prog.Instrs {
		if in.Kind != plan.Compute {
			continue
		}
		switch k := in.Kernel; k.Op {
		case "transpose":
			out = append(out, "transpose")
		case "matmul":
			s := "matmul"
			if k.TransA || k.TransB {
				s += " "
			}
			if k.TransA {
				s += "Aᵀ"
			}
			if k.TransB {
				s += "Bᵀ"
			}
			out = append(out, s)
		}
	}
	return out
}

const mlpTrain = `mesh M = [dp=2]
input x : f32[8, 6] {S(0)} = normal(0, 1)
input t : f32[8, 4] {S(0)} = normal(0, 1)
param W1 : f32[6, 5] = normal(0, 0.3)
param W2 : f32[5, 4] = normal(0, 0.3)
train {
    loss = mse(gelu(x @ W1) @ W2, t)
    optimizer = adam(lr=0.01)
    steps = 1
}
`

// TestFuseGemmMLPBackward: the MLP's backward transposes (W2ᵀ for dh,
// hᵀ and xᵀ for the weight gradients) all go into the GEMMs' flags, the
// fused matmuls read the untransposed slots with their stored shapes,
// the peak is below the unfused plan's (the three copies are gone), and
// NoFuse gives the unfused program back.
func TestFuseGemmMLPBackward(t *testing.T) {
	plain := lowerFuse(t, mlpTrain, Options{NoFuse: true})
	fused := lowerFuse(t, mlpTrain, Options{NoFuseAdam: true}) // the gemm fusion alone
	require.Equal(t, []string{"matmul", "matmul", "transpose", "matmul", "transpose", "matmul", "transpose", "matmul"},
		fusedOps(plain.Exec.Programs[0]))
	require.Equal(t, []string{"matmul", "matmul", "matmul Bᵀ", "matmul Aᵀ", "matmul Aᵀ"}, fusedOps(fused.Exec.Programs[0]))
	require.Len(t, fused.InstrValue, len(fused.Exec.Programs[0].Instrs))
	for i, in := range fused.Exec.Programs[0].Instrs {
		if in.Kind == plan.Compute && in.Kernel.TransB {
			require.Equal(t, []int{5, 4}, in.Kernel.ArgShapes[1]) // W2 as stored
			require.Equal(t, "W2", fused.Exec.Programs[0].Instrs[producerOf(fused.Exec.Programs[0], in.Args[1])].Label)
			require.Equal(t, "matmul", fused.InstrValue[i].Op)
		}
	}
	for r := range plain.Peak {
		require.LessOrEqual(t, fused.Peak[r], plain.Peak[r], "rank %d", r)
	}
	require.Contains(t, fused.Exec.Dump(), "matmul#15(s12, s3ᵀ)")
}

func producerOf(prog *plan.Program, s int) int {
	for i, in := range prog.Instrs {
		if in.Out == s {
			return i
		}
	}
	return -1
}

// TestFuseGemmLeavesWhatItMustNot: a transpose stays materialised when
// its result has a second reader, is an output, swaps other dims than
// the last two, or feeds something other than a matmul; a transpose of
// the last two dims of a batched operand (attention's kᵀ) is fused.
func TestFuseGemmLeavesWhatItMustNot(t *testing.T) {
	head := "mesh M = [dp=1]\ninput a : f32[4, 3] = normal(0, 1)\ninput b : f32[4, 5] = normal(0, 1)\n" +
		"input q : f32[2, 4, 3] = normal(0, 1)\ninput k : f32[2, 5, 3] = normal(0, 1)\ninput w : f32[3, 6] = normal(0, 1)\ninput v : f32[6, 3] = normal(0, 1)\n"
	for _, c := range []struct {
		body string
		want []string
	}{
		{"y = transpose(a) @ b\noutput y\n", []string{"matmul Aᵀ"}},
		{"at = transpose(a)\ny = at @ b\noutput y\noutput at\n", []string{"transpose", "matmul"}},
		{"at = transpose(a)\ny = (at @ b) + (at @ b)\noutput y\n", []string{"transpose", "matmul", "matmul"}},
		{"y = sum(transpose(a))\noutput y\n", []string{"transpose"}},
		{"y = q @ transpose(k)\noutput y\n", []string{"matmul Bᵀ"}},
		{"y = transpose(q, 0, 1) @ w\noutput y\n", []string{"transpose", "matmul"}},
		{"y = transpose(transpose(a) @ b) @ transpose(v)\noutput y\n", []string{"matmul Aᵀ", "matmul AᵀBᵀ"}},
	} {
		p := lowerFuse(t, head+c.body, Options{})
		require.Equal(t, c.want, fusedOps(p.Exec.Programs[0]), "%s", c.body)
	}
}

// TestFuseGemmVerifierCatchesAWrongFlag: the verifier rejects a matmul
// whose flags do not fit its operands (a flag set on the forward's x·W1).
func TestFuseGemmVerifierCatchesAWrongFlag(t *testing.T) {
	p := lowerFuse(t, mlpTrain, Options{})
	require.NoError(t, Verify(p))
	for i := range p.Exec.Programs[0].Instrs {
		in := &p.Exec.Programs[0].Instrs[i]
		if in.Kind == plan.Compute && in.Kernel.Op == "matmul" {
			k := *in.Kernel
			k.TransA = true
			in.Kernel = &k
			break
		}
	}
	require.ErrorContains(t, Verify(p), "matmul#4 at t.mesh:7:23: [8, 6]ᵀ · [6, 5] does not give [8, 5]")
}

// TestFuseGemmKeepsMatmulFLOPs: the matmuls' FLOPs as cost models read
// them (ops.KernelFLOPs over plan.Kernel.AsOperands of the argument
// shapes) are the same with and without the fusion, matmul by matmul:
// a transposed argument's stored shape would count m for k.
func TestFuseGemmKeepsMatmulFLOPs(t *testing.T) {
	flops := func(p *Plan) []float64 {
		var out []float64
		for _, in := range p.Exec.Programs[0].Instrs {
			if in.Kind == plan.Compute && in.Kernel.Op == "matmul" {
				k := in.Kernel
				out = append(out, ops.KernelFLOPs(k.Op, k.Shape, k.AsOperands(k.ArgShapes)))
			}
		}
		return out
	}
	plain, fused := flops(lowerFuse(t, mlpTrain, Options{NoFuse: true})), flops(lowerFuse(t, mlpTrain, Options{}))
	require.Equal(t, []float64{2 * 8 * 5 * 6, 2 * 8 * 4 * 5, 2 * 8 * 5 * 4, 2 * 5 * 4 * 8, 2 * 6 * 5 * 8}, plain)
	require.Equal(t, plain, fused)
}
