//go:build amd64 && linux

package vecmath

import (
	"fmt"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/internal/guardmem"
)

// TestVectorLoopsStayInBounds runs every vector loop on slices flush
// against an inaccessible page at either end, for every length up to
// several vectors past a whole number of them (the tails): a lane that
// reads or writes outside its slice faults, a panic here through
// SetPanicOnFault, instead of touching the memory next to it unseen.
func TestVectorLoopsStayInBounds(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for _, side := range []guardmem.Side{guardmem.AtEnd, guardmem.AtStart} {
		for n := 0; n <= 67; n++ {
			f32 := func() []float32 {
				x, free, err := guardmem.Float32s(n, side)
				require.NoError(t, err)
				t.Cleanup(free)
				for i := range x {
					x[i] = 0.5 + float32(i%7)/8
				}
				return x
			}
			e, free, err := guardmem.Float64s(n, side)
			require.NoError(t, err)
			t.Cleanup(free)
			out, p, m, v, g := f32(), f32(), f32(), f32(), f32()
			mOut, vOut := f32(), f32()
			for name, run := range map[string]func(){
				"AdamUpdate": func() { AdamUpdate(out, p, m, v, 1e-3, 0.9, 1e-8, 0.999) },
				"Moment":     func() { Moment(out, m, g, 0.9, false) },
				"AdamFused": func() {
					AdamFused(out, mOut, vOut, p, m, v, g, AdamHyper{Beta1: 0.9, Beta2: 0.999, Step: 1e-3, RootBC2: 0.9, Eps: 1e-8, Decay: 0.999})
				},
				"Moment²":    func() { Moment(out, m, g, 0.999, true) },
				"Binary":     func() { Binary('*', out, p, m, false, false) },
				"BinaryS":    func() { Binary('+', out, p, m[:min(n, 1)], false, n > 0) },
				"ExpShifted": func() { ExpShifted(e, p, 1) },
				"Gelu":       func() { Gelu(out, p) },
				"GeluGrad":   func() { GeluGrad(out, p) },
				"Transpose":  func() { Transpose(out, p, 1, n) },
			} {
				t.Run(fmt.Sprintf("%s/n=%d/end=%v", name, n, side), func(t *testing.T) {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("out of bounds: %v", r)
						}
					}()
					run()
				})
			}
		}
	}
}

// TestTransposeStaysInBounds: Transpose's 8×8 register blocks and edges
// on matrices flush against an inaccessible page, every shape up to 19×19.
func TestTransposeStaysInBounds(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for _, side := range []guardmem.Side{guardmem.AtEnd, guardmem.AtStart} {
		for m := 1; m <= 19; m++ {
			for n := 1; n <= 19; n++ {
				src, free, err := guardmem.Float32s(m*n, side)
				require.NoError(t, err)
				dst, free2, err := guardmem.Float32s(m*n, side)
				require.NoError(t, err)
				for i := range src {
					src[i] = float32(i)
				}
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("%d×%d, end=%v: out of bounds: %v", m, n, side, r)
						}
					}()
					Transpose(dst, src, m, n)
				}()
				for i := range m {
					for j := range n {
						require.Equal(t, src[i*n+j], dst[j*m+i])
					}
				}
				free()
				free2()
			}
		}
	}
}
