package bench

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/meshrun/meshrun/bench/gptsrc"
	"github.com/meshrun/meshrun/internal/cli"
)

// BenchmarkExplainGPT4096 runs `meshrun explain --devices 4096` on the
// generated GPT (package gptsrc) for a few depths on both meshes, for
// profiling lowering at scale (issue 10, goal 4; bench/lowscale.sh times
// the binary with its RSS). LOWSCALE_LAYERS overrides the depths.
func BenchmarkExplainGPT4096(b *testing.B) {
	depths := []int{12}
	if s := os.Getenv("LOWSCALE_LAYERS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		depths = []int{n}
	}
	for _, mesh := range []string{"3d", "2d"} {
		for _, l := range depths {
			b.Run(mesh+"/L="+strconv.Itoa(l), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "gpt.mesh")
				var src bytes.Buffer
				gptsrc.Write(&src, l, mesh == "3d")
				if err := os.WriteFile(path, src.Bytes(), 0o644); err != nil {
					b.Fatal(err)
				}
				for i := 0; i < b.N; i++ {
					var errs bytes.Buffer
					if code := cli.Main([]string{"explain", "--devices", "4096", path}, nil, io.Discard, &errs); code != 0 {
						b.Fatalf("exit %d: %s", code, errs.String())
					}
				}
			})
		}
	}
}
