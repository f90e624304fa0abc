package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAdamSlices: AdamUpdate and Moment give, bit for bit, the update and
// moments written out here one element at a time, for every length from 0
// to 40 (vector body and scalar tail at every split), including v = 0,
// subnormal and huge values. The reference rounds each product (float32)
// so that the compiler cannot fuse it (GOAMD64=v3, arm64): the vector
// kernel never does.
func TestAdamSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const step, rootBC2, eps, decay = 0.001, 0.97, 1e-8, 0.999
	beta := float32(0.9)
	w := 1 - beta // in f32, as Moment forms it
	for n := 0; n <= 40; n++ {
		p, m, v := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range p {
			p[i], m[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()*1e-2)
			v[i] = []float32{0, 1e-40, 1e30, float32(rng.Float64() * 1e-4)}[rng.IntN(4)]
		}
		got := make([]float32, n+1)
		got[n] = 7
		AdamUpdate(got[:n], p, m, v, step, rootBC2, eps, decay)
		for i := range n {
			denom := float32(math.Sqrt(float64(v[i])))/rootBC2 + eps
			if want := float32(p[i]*decay) - float32(step*(m[i]/denom)); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Fatalf("n=%d: AdamUpdate[%d] = %g, want %g", n, i, got[i], want)
			}
		}
		for _, sq := range []bool{false, true} {
			Moment(got[:n], m, p, beta, sq)
			for i := range n {
				want := float32(m[i]*beta) + float32(p[i]*w)
				if sq {
					want = float32(m[i]*beta) + float32(p[i]*p[i]*w)
				}
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("n=%d square %v: Moment[%d] = %g, want %g", n, sq, i, got[i], want)
				}
			}
		}
		if got[n] != 7 {
			t.Fatalf("n=%d: wrote past the slice", n)
		}
	}
}

// BenchmarkAdamStep runs one Adam step's kernels over two 512×1024
// parameters as a training step does (bench/torch_mlp.sh's MLP): both
// moments and the update per parameter, each output a buffer of its own
// that the next step reads as its input, three sets rotating as an arena
// recycles them (the working set is the step's, 28 MB, beyond L2).
func BenchmarkAdamStep(b *testing.B) {
	const n = 512 * 1024
	ps := benchParams(n)
	b.SetBytes(2 * n * 4)
	for it := 0; b.Loop(); it++ {
		cur, next := it%3, (it+1)%3
		for i := range ps {
			q := &ps[i]
			Moment(q.m[next], q.m[cur], q.g[cur], 0.9, false)
			Moment(q.v[next], q.v[cur], q.g[cur], 0.999, true)
			AdamUpdate(q.p[next], q.p[cur], q.m[next], q.v[next], 1e-3, 0.99, 1e-8, 1)
		}
	}
}

// benchParam is one parameter's p, g, m and v in three sets each, rotating
// as an arena recycles them.
type benchParam struct{ p, g, m, v [3][]float32 }

// benchParams makes the Adam benchmarks' two parameters of n elements.
func benchParams(n int) []benchParam {
	ps := make([]benchParam, 2)
	for i := range ps {
		for j := range 3 {
			ps[i].p[j], ps[i].g[j], ps[i].m[j], ps[i].v[j] = make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for k := range n {
				ps[i].p[j][k], ps[i].g[j][k] = float32(k%97)*0.01, float32(k%89)*1e-3
			}
		}
	}
	return ps
}
