package lang_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
)

// FuzzParseCheck feeds arbitrary text through the parser, the checker and
// lowering. Nothing may panic or hang; errors must carry a position.
// Seeds: every example, every golden program and every error chunk.
//
//	go test ./lang -run '^$' -fuzz FuzzParseCheck -fuzztime 5m
func FuzzParseCheck(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{"../examples/*.mesh", "../testdata/golden/*.mesh", "../stdlib/*.mesh"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err == nil {
				seeds = append(seeds, string(b))
			}
		}
	}
	if b, err := os.ReadFile("testdata/errors.mesh"); err == nil {
		seeds = append(seeds, strings.Split(string(b), "\n---\n")...)
	}
	if len(seeds) < 10 {
		f.Fatalf("only %d seeds found", len(seeds))
	}
	for _, s := range seeds {
		f.Add(s)
	}
	dir, _ := filepath.Abs("testdata")
	f.Fuzz(func(t *testing.T, src string) {
		// A hang is a failure too: give every input 20 seconds.
		done := make(chan struct{})
		go func() {
			defer close(done)
			fuzzOne(t, src, dir)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("input took longer than 20s")
		}
	})
}

func fuzzOne(t *testing.T, src, dir string) {
	{
		g, err := lang.CheckSource("fuzz.mesh", []byte(src), lang.CheckOptions{Devices: 16, Dir: dir})
		if err != nil {
			if list, ok := err.(lang.ErrorList); ok {
				for _, e := range list {
					if e.Pos.Line < 1 {
						t.Errorf("error without a line: %v", e)
					}
				}
			}
			_ = lang.Render(err, map[string][]byte{"fuzz.mesh": []byte(src)})
			return
		}
		// keep lowering cheap: skip huge programs and huge tensors
		if len(g.Values) > 2000 {
			return
		}
		for _, v := range g.Values {
			if v.Type.Numel() > 1<<20 {
				return
			}
		}
		if _, err := lower.Lower(g, lower.Options{Verify: true}); err != nil {
			_ = lang.Render(err, g.Sources)
		}
	}
}
