package rt

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/stretchr/testify/require"
)

// A bucket's all-reduces (bucket.go) must give what each part's own
// all-reduce gives by message passing, the reference: the same bits on
// every member, the same bytes per part and the same ring steps in order.
// The parts mix sizes, so that runs of small parts are staged together
// and a large one between them runs on its own.
func TestBucketMatchesItsAllReduces(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for _, p := range []int{2, 3, 5} {
		for _, dt := range shmDTypes {
			for _, op := range []ReduceOp{OpSum, OpMax} {
				sizes := []int{1, 7, 300, 2*tile + 13, 5, 64}
				if op == OpSum && !isHalf(dt) {
					sizes = append(sizes, 12000, 3) // past the staged run's bound
				}
				parts := make([][]*Tensor, p) // member → its parts
				for m := range parts {
					for _, n := range sizes {
						parts[m] = append(parts[m], randomOf(r, dt, []int{n}, op == OpMax && !isHalf(dt)))
					}
				}
				what := fmt.Sprintf("p=%d %s op=%d", p, dt, op)
				ref := newWorld(t, p, false)
				want, wantSent := make([][]*Tensor, p), make([][]int64, p)
				_, _, wantSteps := ref.run(t, func(ctx context.Context, g *Ring) (Buffer, error) {
					for _, x := range parts[g.Rank] {
						before := ref.tr.BytesSent(g.me())
						out, err := g.AllReduce(ctx, x, op)
						if err != nil {
							return nil, err
						}
						want[g.Rank] = append(want[g.Rank], out.(*Tensor))
						wantSent[g.Rank] = append(wantSent[g.Rank], ref.tr.BytesSent(g.me())-before)
					}
					return nil, nil
				})
				shm := newWorld(t, p, true)
				got, gotSent := make([][]Buffer, p), make([][]int64, p)
				_, total, gotSteps := shm.run(t, func(ctx context.Context, g *Ring) (Buffer, error) {
					xs := make([]Buffer, len(parts[g.Rank]))
					for k, x := range parts[g.Rank] {
						xs[k] = x
					}
					var err error
					got[g.Rank], gotSent[g.Rank] = make([]Buffer, len(xs)), make([]int64, len(xs))
					err = allReduceBucket(ctx, g, xs, op, 0, countedBy(func() int64 { return shm.tr.BytesSent(g.me()) }), got[g.Rank], gotSent[g.Rank])
					return nil, err
				})
				for m := range p {
					var sum int64
					for k := range sizes {
						w := fmt.Sprintf("%s member %d part %d (%d elements)", what, m, k, sizes[k])
						require.Equal(t, want[m][k].Shape, got[m][k].(*Tensor).Shape, w)
						require.Equal(t, want[m][k].Bits(), got[m][k].(*Tensor).Bits(), w)
						require.Equal(t, wantSent[m][k], gotSent[m][k], "%s: bytes", w)
						sum += gotSent[m][k]
					}
					require.Equal(t, total[m], sum, "%s member %d: the parts' bytes are the rank's", what, m)
					require.Equal(t, wantSteps[m], gotSteps[m], "%s member %d: ring steps", what, m)
				}
			}
		}
	}
}

// stagedRun takes parts while their bytes times the group's size stay
// within shmBucketBytes, and no part of another dtype.
func TestStagedRunStopsAtItsBound(t *testing.T) {
	w := newWorld(t, 2, true)
	g := w.groups[0]
	f32 := func(n int) Buffer { return NewTensor(ir.F32, []int{n}) }
	all := shmBucketBytes / 2 / 4 // the f32 elements that fill the bound on 2 members
	require.Equal(t, 3, g.stagedRun([]Buffer{f32(all / 2), f32(all/2 - 1), f32(1)}))
	require.Equal(t, 2, g.stagedRun([]Buffer{f32(all / 2), f32(all / 2), f32(1)}))
	require.Equal(t, 0, g.stagedRun([]Buffer{f32(all + 1)}))
	require.Equal(t, 1, g.stagedRun([]Buffer{f32(1), NewTensor(ir.F64, []int{1})}), "one dtype a run")
	require.Equal(t, 0, newWorld(t, 2, false).groups[0].stagedRun([]Buffer{f32(1), f32(1)}), "message passing stages nothing")
}

// countedBy counts a test's bytes with a function.
type countedBy func() int64

func (f countedBy) BytesSent() int64 { return f() }
