package rt

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// Parts that alone take the shared-memory ring's two-barrier path (their
// bytes times the group's size past shmSmallBytes) are staged together in
// a bucket: each result must still be bitwise the one the part's own
// all-reduce gives on the same ring, for every dtype and both reductions
// (the half sums round once from f32 on both paths).
func TestBucketStagesLargePartsLikeTheirOwnAllReduce(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, p := range []int{2, 3} {
		for _, dt := range shmDTypes {
			for _, op := range []ReduceOp{OpSum, OpMax} {
				n := int(shmSmallBytes)/(p*dt.Size()) + 17 // past the one-barrier bound alone
				sizes := []int{n, 5, n + 3}
				parts := make([][]*Tensor, p)
				for m := range parts {
					for _, k := range sizes {
						parts[m] = append(parts[m], randomOf(r, dt, []int{k}, op == OpMax))
					}
				}
				what := fmt.Sprintf("p=%d %s op=%d", p, dt, op)
				own := newWorld(t, p, true)
				require.False(t, own.groups[0].isSmall(int64(n*dt.Size())), "%s: a part alone is not small", what)
				want := make([][]*Tensor, p)
				own.run(t, func(ctx context.Context, g *Ring) (Buffer, error) {
					for _, x := range parts[g.Rank] {
						out, err := g.AllReduce(ctx, x, op)
						if err != nil {
							return nil, err
						}
						want[g.Rank] = append(want[g.Rank], out.(*Tensor))
					}
					return nil, nil
				})
				w := newWorld(t, p, true)
				xs0 := make([]Buffer, len(sizes))
				for k, x := range parts[0] {
					xs0[k] = x
				}
				require.Equal(t, len(sizes), w.groups[0].stagedRun(xs0), "%s: the bucket stages every part", what)
				got := make([][]Buffer, p)
				w.run(t, func(ctx context.Context, g *Ring) (Buffer, error) {
					xs := make([]Buffer, len(sizes))
					for k, x := range parts[g.Rank] {
						xs[k] = x
					}
					var err error
					got[g.Rank] = make([]Buffer, len(xs))
					err = allReduceBucket(ctx, g, xs, op, 0, countedBy(func() int64 { return w.tr.BytesSent(g.me()) }), got[g.Rank], make([]int64, len(xs)))
					return nil, err
				})
				for m := range p {
					for k := range sizes {
						require.Equal(t, want[m][k].Bits(), got[m][k].(*Tensor).Bits(), "%s member %d part %d", what, m, k)
					}
				}
			}
		}
	}
}

// runAll calls f on every member at once, each with its own deadline,
// and returns each member's error (nil results are fine).
func runAll(w *world, limit time.Duration, f func(ctx context.Context, g *Ring) error) []error {
	errs := make([]error, w.p)
	var wg sync.WaitGroup
	for i, g := range w.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			errs[i] = f(ctx, g)
		}()
	}
	wg.Wait()
	return errs
}

// A member whose bucket differs from its peers' (another size, so that it
// stages another run) or that never comes makes the bucket an error on
// every member, within the deadline, not a hang or a wrong result.
func TestBucketMismatchOrAbsenceIsAnError(t *testing.T) {
	f32 := func(n int) Buffer { return randomOf(rand.New(rand.NewSource(int64(n))), ir.F32, []int{n}, false) }
	for _, c := range []struct {
		name  string
		parts func(rank int) []Buffer // nil: the member does not come
	}{
		{"a part of another size", func(rank int) []Buffer {
			if rank == 1 {
				return []Buffer{f32(8), f32(9)}
			}
			return []Buffer{f32(8), f32(10)}
		}},
		{"a part too big to stage", func(rank int) []Buffer {
			if rank == 2 {
				return []Buffer{f32(shmBucketBytes), f32(10)}
			}
			return []Buffer{f32(8), f32(10)}
		}},
		{"a member that never comes", func(rank int) []Buffer {
			if rank == 0 {
				return nil
			}
			return []Buffer{f32(8), f32(10)}
		}},
	} {
		w := newWorld(t, 3, true)
		for _, g := range w.groups {
			g.SetTimeout(2 * time.Second)
		}
		start := time.Now()
		errs := runAll(w, 3*time.Second, func(ctx context.Context, g *Ring) error {
			xs := c.parts(g.Rank)
			if xs == nil {
				return fmt.Errorf("absent")
			}
			err := allReduceBucket(ctx, g, xs, OpSum, 0, countedBy(func() int64 { return 0 }), make([]Buffer, len(xs)), make([]int64, len(xs)))
			return err
		})
		require.Less(t, time.Since(start), 30*time.Second, c.name) // generous: a hang is minutes
		for m, err := range errs {
			require.Error(t, err, "%s: member %d", c.name, m)
		}
	}
}

// bucketVariants are training programs whose gradients share buckets
// under ZeRO, f16 loss scaling (with its skipped steps), clipping,
// offload and pipelines: example files and sources.
func bucketVariants() (files []string, srcs map[string]string) {
	for _, name := range []string{"mlp_bf16", "moe", "gemm_backward", "gpt/gpt_3d", "mlp_zero3", "mlp_offload", "mlp_offload_pipe", "pipeline_schedules"} {
		files = append(files, filepath.Join("..", "examples", "train", name+".mesh"))
	}
	srcs = map[string]string{}
	for zero := range 4 {
		for _, prec := range []string{"", "precision = f16\n", "precision = f16\n    clip = 0.5\n", "precision = bf16\n"} {
			name := fmt.Sprintf("mlp zero=%d %q", zero, prec)
			srcs[name] = strings.Replace(mixedSrc, "PREC", fmt.Sprintf("    zero = %d\n    %s", zero, prec), 1)
		}
		srcs[fmt.Sprintf("pipe3D 1f1b zero=%d f16 clip", zero)] = offPipe("1f1b", zero, "f16", "", true)
		srcs[fmt.Sprintf("pipe3D zbv zero=%d offload", zero)] = offPipe("zbv", zero, "", "optimizer", false)
	}
	// uneven tp blocks (7 and 10 split 3/2/2, 4/3/3): the dp groups at
	// each tp coordinate bucket blocks of their own sizes
	srcs["uneven dp×tp"] = `mesh M = [dp=2, tp=3]
input x : f32[8, 7] {S(0), B} = normal(0, 1)
input t : f32[8, 5] {S(0), B} = normal(0, 1)
param W1 : f32[7, 10] {B, S(1)} = normal(0, 0.3)
param b1 : f32[10] {B, S(0)} = normal(0, 0.1)
param W2 : f32[10, 5] {B, S(0)} = normal(0, 0.3)
train {
    loss = mse(tanh(x @ W1 + b1) @ W2, t)
    optimizer = adam(lr=0.01)
    steps = 3
}
`
	return files, srcs
}

// Training with buckets is training without them on every variant: the
// same losses, skipped steps and parameters bit for bit, the same bytes per
// collective and the same measured peaks (as TestBucketedTrainingIs-
// UnbucketedTraining holds for the plain examples).
func TestBucketedTrainingIsUnbucketedUnderEveryFeature(t *testing.T) {
	joins := 0
	files, srcs := bucketVariants()
	graphs := map[string]*lang.Graph{}
	for _, f := range files {
		g, _, err := lang.CheckFile(f, lang.CheckOptions{})
		require.NoError(t, err, f)
		graphs[f] = g
	}
	for name, src := range srcs {
		g, err := lang.CheckSource("m.mesh", []byte(src), lang.CheckOptions{})
		require.NoError(t, err, name)
		graphs[name] = g
	}
	for name, g := range graphs {
		if g.Train.Steps > 4 {
			g.Train.Steps = 4
		}
		train := func(noBucket bool) (*lower.Plan, *TrainResult) {
			p, err := lower.Lower(g, lower.Options{Verify: true, NoBucket: noBucket})
			require.NoError(t, err, name)
			res, err := Train(context.Background(), p, Options{}, TrainConfig{})
			require.NoError(t, err, name)
			return p, res
		}
		ref, alone := train(true)
		p, res := train(false)
		n := 0
		for _, prog := range p.Exec.Programs {
			for _, in := range prog.Instrs {
				if in.Joins {
					n++
				}
			}
		}
		t.Logf("%s: %d all-reduces join a bucket; %d of %d steps applied", name, n, res.Applied, len(res.Losses))
		joins += n
		requireSameTraining(t, alone, res, name)
		require.Equal(t, alone.Applied, res.Applied, "%s: steps applied", name)
		require.Equal(t, ref.Peak, p.Peak, "%s: planned peaks", name)
		for d, st := range res.Last.Devices {
			require.Equal(t, commBytes(alone.Last.Devices[d].Events), commBytes(st.Events), "%s device %d: bytes per collective", name, d)
			require.Equal(t, alone.Last.Devices[d].Peak, st.Peak, "%s device %d: measured peak", name, d)
		}
	}
	require.Positive(t, joins)
}

// A bucket's members run no dispatch (rank.go), so they must not see the
// further results (execution.more) the instruction before them left: here
// mlp_dp's program ends with a fused Adam update (results p', m', v' of
// shape [4]) followed by a bucket of two all-reduces of the loss (shape
// []), appended by hand, and the step must check the members' own results
// only.
func TestBucketAfterAFusedUpdate(t *testing.T) {
	g, _, err := lang.CheckFile(filepath.Join("..", "examples", "train", "mlp_dp.mesh"), lang.CheckOptions{})
	require.NoError(t, err)
	g.Train.Steps = 2
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	prog := p.Exec.Programs[0]
	last := &prog.Instrs[len(prog.Instrs)-1]
	require.NotEmpty(t, last.Outs, "the program ends with a fused update")
	var loss plan.Instr
	for _, in := range prog.Instrs {
		if in.Label == "train.loss" && in.Kind == plan.Collective {
			loss = in
		}
	}
	require.Equal(t, loss.Out, prog.OutputSlots[0], "the loss's all-reduce makes the output")
	for k := range 2 {
		in := loss
		// each result dies where it is made, as lower frees an unread one
		in.Label, in.Args, in.Out, in.Joins = fmt.Sprint("again", k), []int{loss.Out}, prog.NumSlots(), k == 1
		in.Free = []int{in.Out}
		prog.SlotType = append(prog.SlotType, in.DType)
		prog.Instrs = append(prog.Instrs, in)
	}
	require.NoError(t, p.Exec.Verify())
	_, err = Train(context.Background(), p, Options{}, TrainConfig{})
	require.NoError(t, err)
}

// failingGroup fails the failAt-th all-reduce launched through it (the
// others run on the group it wraps): a bucket's part failing after its
// first launched. A wrapper is no shared-memory ring to stage on, so a
// bucket through it runs part by part (every rank's must, to stay in
// step).
type failingGroup struct {
	Group
	n, failAt int
}

func (g *failingGroup) AllReduce(ctx context.Context, x Buffer, op ReduceOp) (Buffer, error) {
	g.n++
	if g.n == g.failAt {
		return nil, fmt.Errorf("injected failure")
	}
	return g.Group.AllReduce(ctx, x, op)
}

// A bucket whose second or third member's launch fails reports the
// fault at that member — its value, and that it was launched with the
// bucket's first — not at the first member, which launched them all.
func TestBucketFaultNamesTheMemberThatFailed(t *testing.T) {
	p := compile(t, `mesh M = [tp=2]
param x : f32[4, 8] {S(1)} = normal(0, 1)
param W1 : f32[8, 4] {S(0)} = normal(0, 1)
param W2 : f32[8, 3] {S(0)} = normal(0, 1)
param W3 : f32[8, 5] {S(0)} = normal(0, 1)
y1 = x @ W1
y2 = x @ W2
y3 = x @ W3
output y1 {B}
output y2 {B}
output y3 {B}
`)
	require.Equal(t, 3, p.Exec.Programs[0].BucketAt(slices.IndexFunc(p.Exec.Programs[0].Instrs, func(in plan.Instr) bool { return in.Kind == plan.Collective })))
	for failAt, want := range map[int]string{
		1: "t.mesh:9:1: device 0 (tp=0): all_reduce over tp of y1: injected failure",
		2: "t.mesh:10:1: device 0 (tp=0): all_reduce over tp of y2: injected failure (member 2 of 3 of a bucket launched together by all_reduce over tp of y1)",
		3: "t.mesh:11:1: device 0 (tp=0): all_reduce over tp of y3: injected failure (member 3 of 3 of a bucket launched together by all_reduce over tp of y1)",
	} {
		l, err := NewLocal(context.Background(), p.Exec, Options{Timeout: 2 * time.Second})
		require.NoError(t, err)
		for r, w := range l.Workers { // every rank per part; rank 0's part fails
			at := -1
			if r == 0 {
				at = failAt
			}
			w.Groups[0] = &failingGroup{Group: w.Groups[0], failAt: at}
		}
		_, err = l.Run(context.Background(), nil)
		var re *RunError
		require.True(t, errors.As(err, &re), "failAt %d: %v", failAt, err)
		require.Equal(t, 0, re.Device, "failAt %d: %v", failAt, err)
		require.Equal(t, want, re.Error(), "failAt %d", failAt)
	}
}
