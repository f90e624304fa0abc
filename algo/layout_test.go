package algo_test

import (
	"encoding/xml"
	"fmt"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/stretchr/testify/require"
)

// Every element of every operand is held by the number of devices the
// layout replicates it over, and what a device holds is what Cost says
// it holds.
func TestBlocksTileTheOperandsAndMatchTheMemory(t *testing.T) {
	for _, g := range []algo.GEMM{{M: 8, K: 8, N: 8, Elem: 4}, {M: 9, K: 7, N: 5, Elem: 2}} {
		for _, p := range []int{4, 8, 12, 27} {
			for _, l := range algo.Layouts(p) {
				for _, o := range []algo.Operand{algo.X, algo.W, algo.Y} {
					shape := map[algo.Operand][2]int{algo.X: {g.M, g.K}, algo.W: {g.K, g.N}, algo.Y: {g.M, g.N}}[o]
					rows, cols := shape[0], shape[1]
					count := make([]int, rows*cols)
					for _, b := range g.Blocks(l, o) {
						for i := b.R0; i < b.R0+b.NR; i++ {
							for j := b.C0; j < b.C0+b.NC; j++ {
								count[i*cols+j] += len(b.Devices)
							}
						}
					}
					want := 1
					switch {
					case l.Kind == algo.OneDColumn && o == algo.X, l.Kind == algo.OneDRow && o == algo.Y:
						want = p
					case l.Kind == algo.TwoHalfD && o == algo.W:
						want = l.D
					}
					for e, c := range count {
						require.Equal(t, want, c, "%s %c element %d", l, o, e)
					}
				}
				for d, c := range g.Costs(l, nil) {
					held := func(o algo.Operand) int64 {
						r := g.Held(l, o, d)
						return int64(r.NR * r.NC * g.Elem)
					}
					require.Equal(t, c.Inputs, held(algo.X), "%s device %d X", l, d)
					require.Equal(t, c.Weights, held(algo.W), "%s device %d W", l, d)
					require.Equal(t, c.Outputs, held(algo.Y), "%s device %d Y", l, d)
				}
			}
		}
	}
}

func TestSVGsAreWellFormedAndLabelEveryDevice(t *testing.T) {
	g := algo.GEMM{M: 8, K: 8, N: 8, Elem: 4}
	for _, l := range algo.Layouts(8) {
		svg := g.SVG(l)
		dec := xml.NewDecoder(strings.NewReader(string(svg)))
		for {
			_, err := dec.Token()
			if err != nil {
				require.Equal(t, "EOF", err.Error(), l.String())
				break
			}
		}
		for d := range 8 {
			require.Contains(t, string(svg), fmt.Sprintf("device %d ", d), l.String())
		}
	}
	l := algo.Layout{Kind: algo.TwoHalfD, Q: 2, D: 2}
	step, err := g.StepSVG(l, 1)
	require.NoError(t, err)
	// step 1 moves X blocks of devices with col = 1 (1, 3, 5, 7) and W
	// blocks of devices with row = 1: the others are drawn pale
	require.Equal(t, 4+2, strings.Count(string(step), `fill-opacity="0.25" stroke`), "pale blocks: X of col 0, W of row 0")
	require.Equal(t, 4+2, strings.Count(string(step), "marker-end"), "one arrow per moving block")
	_, err = g.StepSVG(algo.Layout{Kind: algo.ThreeD, Q: 2}, 0)
	require.ErrorContains(t, err, "has no SUMMA steps")
	_, err = g.StepSVG(l, 2)
	require.ErrorContains(t, err, "steps 0 to 1")
}
