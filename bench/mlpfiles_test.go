package bench

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
)

// BenchmarkMLPStepFiles is BenchmarkMLPStep with its data and weights
// loaded from .npy files, as bench/torch_mlp.sh feeds them: the inputs are
// copied out of the loaded file each step instead of drawn from normal,
// which was about 40% of BenchmarkMLPStep's profile and is no part of the
// step PyTorch is compared against. One device ("dp=1") and the
// data-parallel pair ("dp=2", the batch split over it).
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
			timeTrainSteps(b, g, lower.Options{})
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
