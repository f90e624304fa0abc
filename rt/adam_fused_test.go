package rt

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// hideResults is a backend without ResultsLauncher: LaunchResults runs
// adam_fused on it as its three kernels, as on the CUDA backend.
type hideResults struct{ Backend }

// adamKernels are the fused kernel and its three parts on n elements.
func adamKernels(dt ir.DType, n int) (fused, moment, moment2, update *plan.Kernel) {
	sh := []int{n}
	k := func(op string, args ...[]int) *plan.Kernel {
		pk := &plan.Kernel{Op: op, DType: dt, Shape: sh}
		for _, a := range args {
			pk.ArgDTypes, pk.ArgShapes = append(pk.ArgDTypes, dt), append(pk.ArgShapes, a)
		}
		return pk
	}
	s := []int{}
	return k("adam_fused", sh, sh, sh, sh, s, s, s, s, s, s), k("adam_moment", sh, sh, s), k("adam_moment2", sh, sh, s), k("adam_update", sh, sh, sh, s, s, s, s)
}

// TestAdamFusedKernelEqualsThreeKernels: the CPU's adam_fused gives, bit
// for bit, what adam_moment, adam_moment2 and adam_update give launched
// one after the other, in f32 (vector body and tail) and f64, with weight
// decay and without; so does LaunchResults on a backend without the fused
// kernel (the separate kernels into as many buffers). The arguments are
// not written.
func TestAdamFusedKernelEqualsThreeKernels(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	cpu := &CPU{}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, n := range []int{1, 7, 8, 37, 1000, parallelGrain, parallelGrain + 9} { // (either side of adamFused's small path)
			for _, decay := range []float64{1, 0.999} {
				name := fmt.Sprintf("%s n=%d decay=%g", dt, n, decay)
				vec := func(scale float64, abs bool) *Tensor {
					v := make([]float64, n)
					for i := range v {
						v[i] = rng.NormFloat64() * scale
						if abs {
							v[i] = math.Abs(v[i])
						}
					}
					return floatTensor(dt, []int{n}, v...)
				}
				scalar := func(v float64) *Tensor { return floatTensor(dt, []int{}, v) }
				p, m, v, g := vec(1, false), vec(1e-2, false), vec(1e-3, true), vec(1e-1, false)
				b1, b2, step, rbc2, eps, dec := scalar(0.9), scalar(0.999), scalar(1e-3), scalar(0.97), scalar(1e-8), scalar(decay)
				args := []Buffer{p, m, v, g, b1, b2, step, rbc2, eps, dec}
				before := make([][]float64, len(args))
				for i, a := range args {
					before[i] = append([]float64(nil), a.(*Tensor).Float64s()...)
				}
				blk := sbp.Block{Off: []int{0}, Len: []int{n}}
				sb := sbp.Block{Off: []int{}, Len: []int{}}
				in := []sbp.Block{blk, blk, blk, blk, sb, sb, sb, sb, sb, sb}
				fk, mk, vk, uk := adamKernels(dt, n)
				nm, err := cpu.Launch(ctx, mk, []Buffer{m, g, b1}, in[:3], blk)
				require.NoError(t, err)
				nv, err := cpu.Launch(ctx, vk, []Buffer{v, g, b2}, in[:3], blk)
				require.NoError(t, err)
				np, err := cpu.Launch(ctx, uk, []Buffer{p, nm, nv, step, rbc2, eps, dec}, in[:7], blk)
				require.NoError(t, err)
				want := []Buffer{np, nm, nv}
				for _, be := range []Backend{cpu, hideResults{cpu}} {
					got, err := LaunchResults(ctx, be, fk, args, in, blk, 3)
					require.NoError(t, err, name)
					require.Len(t, got, 3)
					for k := range want {
						w, g := want[k].(*Tensor).Float64s(), got[k].(*Tensor).Float64s()
						for i := range w {
							require.Equal(t, math.Float64bits(w[i]), math.Float64bits(g[i]), "%s %T result %d [%d]: %g, three kernels %g", name, be, k, i, g[i], w[i])
						}
					}
				}
				for i, a := range args {
					require.Equal(t, before[i], a.(*Tensor).Float64s(), "%s: argument %d written", name, i)
				}
			}
		}
	}
	_, err := LaunchResults(ctx, hideResults{cpu}, &plan.Kernel{Op: "matmul"}, nil, nil, sbp.Block{}, 2)
	require.ErrorContains(t, err, "no kernel for matmul with 2 results")
}

// floatTensor is a tensor of dt and shape holding v, converted.
func floatTensor(dt ir.DType, shape []int, v ...float64) *Tensor {
	x := NewTensor(dt, shape)
	setFloats(x, v)
	return x
}

func setFloats(x *Tensor, v []float64) {
	switch d := x.Data.(type) {
	case []float32:
		for i := range d {
			d[i] = float32(v[i])
		}
	case []float64:
		copy(d, v)
	}
}

// adamMLP is a two-layer MLP on [dp=2] trained 3 steps with an optimizer
// and extra train-block lines; its activations outweigh its parameters,
// so that the optimizer step is not its peak and the fusion applies.
func adamMLP(opt, extra string) string {
	return "mesh M = [dp=2]\ninput x : f32[64, 6] {S(0)} = normal(0, 1)\ninput t : f32[64, 4] {S(0)} = normal(0, 1)\n" +
		"param W1 : f32[6, 10] = normal(0, 0.3)\nparam b1 : f32[10] = normal(0, 0.1)\nparam W2 : f32[10, 4] = normal(0, 0.3)\n" +
		"train {\n    loss = mse(gelu(x @ W1 + b1) @ W2, t)\n    optimizer = " + opt + "\n    steps = 3\n    data_axis = dp\n" + extra + "}\n"
}

// TestFusedAdamTrainsAsThreeOps: lower's Adam fusion changes no bit of
// training. Adam, AdamW and Adam with L2 weight decay, ZeRO 0–3, f16 and
// bf16 mixed precision (f32 master weights; f16 with its overflow flag),
// clipping, offload, and a pipeline (pp×dp×tp with every ZeRO stage,
// offload and f16) train to the same losses and parameters with the
// fusion as without (lower.Options.NoFuseAdam); every fused plan holds
// some adam_fused, and the separate ops only in threes (the updates the
// pass left alone so that no peak grows); no rank's plan peak, device or
// host, is above the unfused plan's; and each fused run's measured device
// and host peaks equal its plan's.
func TestFusedAdamTrainsAsThreeOps(t *testing.T) {
	cases := map[string]string{
		"adam":            adamMLP("adam(lr=0.01)", ""),
		"adamw":           adamMLP("adamw(lr=0.01, weight_decay=0.1)", ""),
		"adam l2":         adamMLP("adam(lr=0.01, weight_decay=0.1)", ""),
		"zero1 clip":      adamMLP("adam(lr=0.01)", "    zero = 1\n    clip = 0.5\n"),
		"zero2 f16":       adamMLP("adam(lr=0.01)", "    zero = 2\n    precision = f16\n"),
		"zero3 bf16":      adamMLP("adamw(lr=0.01)", "    zero = 3\n    precision = bf16\n"),
		"offload":         adamMLP("adam(lr=0.01)", "    zero = 1\n    offload = optimizer\n"),
		"offload params":  adamMLP("adam(lr=0.01)", "    zero = 2\n    offload = optimizer+params\n"),
		"pipe 1f1b zero1": offPipe("1f1b", 1, "", "", false),
		"pipe zbv zero3":  offPipe("zbv", 3, "f16", "", true),
		"pipe gpipe off":  offPipe("gpipe", 2, "", "optimizer", false),
	}
	for name, src := range cases {
		g, err := lang.CheckSource("adam.mesh", []byte(src), lang.CheckOptions{})
		require.NoError(t, err, name)
		fp := requireFusionChangesNothing(t, g, name)
		n, parts := 0, 0
		for _, prog := range fp.Exec.Programs {
			for _, in := range prog.Instrs {
				if in.Kind != plan.Compute {
					continue
				}
				switch in.Kernel.Op {
				case "adam_fused":
					n++
				case "adam_moment", "adam_moment2", "adam_update":
					parts++
				}
			}
		}
		require.Positive(t, n, "%s: no update fused", name)
		require.Zero(t, parts%3, "%s: %d separate Adam ops, not whole updates", name, parts)
		if strings.Contains(name, "pipe") {
			require.NotNil(t, fp.Pipe, name)
		}
	}
}

// requireFusionChangesNothing trains g for its steps with the Adam fusion
// and without (lower.Options.NoFuseAdam) and requires the same training
// bit for bit, no rank's device or host peak grown by the fusion, and
// every peak the runtime measured in the fused run equal to the plan's.
// It returns the fused plan.
func requireFusionChangesNothing(t *testing.T, g *ir.Graph, name string) *lower.Plan {
	t.Helper()
	run := func(noFuse bool) (*lower.Plan, *TrainResult) {
		p, err := lower.Lower(g, lower.Options{Verify: true, NoFuseAdam: noFuse})
		require.NoError(t, err, name)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err, name)
		return p, res
	}
	fp, fused := run(false)
	pp, plain := run(true)
	for r := range pp.Peak {
		require.LessOrEqual(t, fp.Peak[r], pp.Peak[r], "%s: rank %d's peak grew", name, r)
		if pp.HostPeak != nil {
			require.LessOrEqual(t, fp.HostPeak[r], pp.HostPeak[r], "%s: rank %d's host peak grew", name, r)
		}
	}
	requireSameTraining(t, plain, fused, name)
	for _, d := range fused.Last.Devices {
		require.Equal(t, fp.Peak[d.Device], d.Peak, "%s: rank %d's measured peak equals the plan's", name, d.Device)
		if fp.HostPeak != nil {
			require.Equal(t, fp.HostPeak[d.Device], d.HostPeak, "%s: rank %d's measured host peak", name, d.Device)
		}
	}
	return fp
}
