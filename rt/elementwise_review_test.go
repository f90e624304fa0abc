package rt

import (
	"fmt"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/stretchr/testify/require"
)

// elementwiseRef is a binary op by its definition, in T: each output
// element read through each operand's broadcast (idxOf), one at a time.
func elementwiseRef[T Float](op string, x, y []float64, xs, ys, shape []int) []float64 {
	f := binaryFn[T](op)
	n := 1
	for _, d := range shape {
		n *= d
	}
	out := make([]float64, n)
	for o := range out {
		out[o] = float64(f(T(x[idxOf(o, shape, xs)]), T(y[idxOf(o, shape, ys)])))
	}
	return out
}

// The elementwise kernel, its small loops called without parallelFor's
// closure and its broadcast shape built on the stack, gives each op's
// definition bit for bit: same shapes, a scalar on either side (rank 0
// and [1]s), broadcasts that repeat and that do not, lengths either side
// of parallelGrain, more dims than the stack buffer holds; from a fresh
// tensor or an arena's recycled one; and its shape is its own.
func TestElementwiseSmallPathsMatchDefinition(t *testing.T) {
	g := parallelGrain
	cases := [][2][]int{
		{{5}, {5}}, {{g}, {g}}, {{g + 1}, {g + 1}}, {{2, g / 2}, {2, g / 2}},
		{{g}, {}}, {{}, {g}}, {{g + 8}, {1}}, {{1, 1}, {3, 7}}, {{3, 7}, {1}},
		{{4, g / 4}, {g / 4}}, {{g / 4}, {4, g / 4}}, {{4, 1}, {1, 9}}, {{g / 8, 1}, {1, 9}},
		{{2, 1, 3}, {4, 1}}, {{}, {}}, {{0, 3}, {3}},
		{{2, 1, 2, 1, 2, 1, 2, 1, 2, 3}, {2, 1, 2, 1, 2, 1, 2, 1, 3}},
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		pool := newArena(0)
		for _, c := range cases {
			for _, op := range []string{"add", "sub", "mul", "div", "maximum"} {
				for round := range 2 { // the second takes the first's buffer back
					name := fmt.Sprintf("%s %v %s %v round %d", dt, c[0], op, c[1], round)
					x, y := NewTensor(dt, c[0]), NewTensor(dt, c[1])
					xv, yv := make([]float64, x.Numel()), make([]float64, y.Numel())
					for i := range xv {
						xv[i] = float64(i%13) - 6.25
					}
					for i := range yv {
						yv[i] = float64(i%7) + 0.75
					}
					setFloats(x, xv)
					setFloats(y, yv)
					out, err := elementwise(pool, op, x, y)
					require.NoError(t, err, name)
					shape := refBroadcast(c[0], c[1])
					require.Equal(t, shape, out.Shape, name)
					want := elementwiseRef[float64](op, xv, yv, c[0], c[1], shape)
					if dt == ir.F32 {
						want = elementwiseRef[float32](op, xv, yv, c[0], c[1], shape)
					}
					require.Equal(t, want, out.Float64s(), name)
					for _, s := range [][]int{x.Shape, y.Shape} {
						if len(s) > 0 && len(out.Shape) > 0 {
							require.NotSame(t, &s[0], &out.Shape[0], "%s: the output's shape is an operand's", name)
						}
					}
					pool.put(out)
				}
			}
		}
	}
}

// refBroadcast is NumPy's broadcast of two valid shapes, written out.
func refBroadcast(a, b []int) []int {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := range out {
		da, db := 1, 1
		if k := i - n + len(a); k >= 0 {
			da = a[k]
		}
		if k := i - n + len(b); k >= 0 {
			db = b[k]
		}
		out[i] = da
		if da == 1 {
			out[i] = db
		}
	}
	return out
}

// idxOf is the offset in an operand of shape s of output element o of
// shape: o's multi-index, index 0 along s's dims of 1 and missing dims.
func idxOf(o int, shape, s []int) int {
	idx := make([]int, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		idx[k] = o % shape[k]
		o /= shape[k]
	}
	off := 0
	for k, d := range s {
		i := idx[len(idx)-len(s)+k]
		if d == 1 {
			i = 0
		}
		off = off*d + i
	}
	return off
}
