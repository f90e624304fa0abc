package bench

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
)

// BenchmarkMLPStepFiles is BenchmarkMLPStep with its data and weights
// loaded from .npy files, as bench/torch_mlp.sh feeds them: the inputs are
// copied out of the loaded file each step instead of drawn from normal,
// which was about 40% of BenchmarkMLPStep's profile and is no part of the
// step PyTorch is compared against. One device ("dp=1") and the
// data-parallel pair ("dp=2", the batch split over it).
//
// It also reports, from the ranks' timelines, the milliseconds a step
// spends in GEMMs ("gemm_ms") and in the Adam update ("adam_ms"), summed
// over the ranks: at GOMAXPROCS=1 (bench/torch_mlp.sh's 1-thread figure)
// the ranks take turns on one core, so the sum is work that core must do
// whatever the rest costs, a floor under the step that the runtime itself
// measured. On [dp=2] each rank multiplies half the batch by the whole
// weights, so OpenBLAS packs every weight once per rank; and each rank
// keeps its own replica of Adam.
func BenchmarkMLPStepFiles(b *testing.B) {
	dir := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range []struct {
		name  string
		shape []int
		scale float32
	}{{"x", []int{256, 512}, 1}, {"t", []int{256, 512}, 1}, {"W1", []int{512, 1024}, 0.044}, {"W2", []int{1024, 512}, 0.031}} {
		data := make([]float32, f.shape[0]*f.shape[1])
		for i := range data {
			data[i] = float32(rng.NormFloat64()) * f.scale
		}
		writeNpyFile(b, filepath.Join(dir, f.name+".npy"), f.shape, data)
	}
	for _, c := range []struct{ mesh, split string }{{"dp=1", ""}, {"dp=2", "{S(0)}"}} {
		b.Run(c.mesh, func(b *testing.B) {
			src := mlpSource(c.mesh, c.split)
			for _, n := range []string{"x", "t", "W1", "W2"} {
				src = replaceInit(src, n)
			}
			g, err := lang.CheckSource("mlp.mesh", []byte(src), lang.CheckOptions{Dir: dir})
			if err != nil {
				b.Fatal(err)
			}
			var gemm, adam time.Duration
			timeTrainStepsWith(b, g, lower.Options{}, func(r *rt.Result) {
				for _, d := range r.Devices {
					for _, e := range d.Events {
						switch op, _, _ := strings.Cut(e.Name, " -> "); {
						case e.Kind != "compute":
						case op == "matmul":
							gemm += e.Dur
						case strings.HasPrefix(op, "adam"):
							adam += e.Dur
						}
					}
				}
			})
			b.ReportMetric(float64(gemm)/float64(b.N)/1e6, "gemm_ms")
			b.ReportMetric(float64(adam)/float64(b.N)/1e6, "adam_ms")
		})
	}
}

// replaceInit swaps the initialiser of mlpSource's declaration of name
// for load("name.npy").
func replaceInit(src, name string) string {
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if strings.Contains(l, " "+name+" : ") {
			lines[i] = l[:strings.LastIndex(l, "= ")] + `= load("` + name + `.npy")`
		}
	}
	return strings.Join(lines, "\n")
}

func writeNpyFile(b *testing.B, path string, shape []int, data []float32) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := npy.Write(f, shape, data); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
