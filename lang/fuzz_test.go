package lang_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
)

// FuzzParseCheck feeds arbitrary text through the parser, the checker and
// lowering (with the verifier after every pass). Nothing may panic or hang;
// errors must carry a position; lowering may reject a program but never fail
// internally.
// Seeds: every example, every golden program and every error chunk.
//
//	go test ./lang -run '^$' -fuzz FuzzParseCheck -fuzztime 5m
func FuzzParseCheck(f *testing.F) {
	dir, _ := filepath.Abs("testdata")
	var seeds []string
	for _, pattern := range []string{"../examples/*.mesh", "../examples/*/*.mesh", "../examples/*/*/*.mesh", "../testdata/golden/*.mesh", "../stdlib/*.mesh"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				continue
			}
			// A seed's load("f.npy") is relative to its own file; every
			// input is checked against dir, so point the loads there (a
			// relative path keeps saved crashers portable). Without this
			// most seeds stop at "no such file" and never reach lowering.
			abs, _ := filepath.Abs(filepath.Dir(file))
			rel, err := filepath.Rel(dir, abs)
			if err != nil {
				continue
			}
			seeds = append(seeds, strings.ReplaceAll(string(b), `load("`, `load("`+filepath.ToSlash(rel)+"/"))
		}
	}
	// Only inputs the checker accepts exercise lowering: if most program
	// seeds stopped passing the checker (stdlib modules declare no mesh and
	// never do), the fuzzer would hardly test lowering at all.
	accepted, programs := 0, 0
	for _, s := range seeds {
		if !strings.Contains(s, "mesh ") {
			continue
		}
		programs++
		if _, err := lang.CheckSource("seed.mesh", []byte(s), lang.CheckOptions{Devices: 16, Dir: dir}); err == nil {
			accepted++
		}
	}
	if accepted < programs*3/4 {
		f.Fatalf("only %d of %d program seeds pass the checker", accepted, programs)
	}
	for _, f := range []string{"testdata/errors.mesh", "testdata/local_errors.mesh"} {
		if b, err := os.ReadFile(f); err == nil {
			seeds = append(seeds, strings.Split(string(b), "\n---\n")...)
		}
	}
	if len(seeds) < 10 {
		f.Fatalf("only %d seeds found", len(seeds))
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		// A hang is a failure too: every input gets 60 seconds of this
		// process's CPU time (wall time on a shared machine measures the
		// other jobs), and 5 minutes of wall time for a hang that waits.
		done := make(chan struct{})
		go func() {
			defer close(done)
			fuzzOne(t, src, dir)
		}()
		start, cpu0 := time.Now(), cpuTime()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if used := cpuTime() - cpu0; used > 60*time.Second {
					t.Fatalf("input took more than 60s of CPU time")
				}
				if time.Since(start) > 5*time.Minute {
					t.Fatalf("input still running after 5 minutes")
				}
			}
		}
	})
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
		// A program lowering rejects is fine (its error is rendered like any
		// other); a panic in a pass or a plan the verifier rejects is a bug in
		// meshrun, which runPass marks with lower.ErrInternal.
		if _, err := lower.Lower(g, lower.Options{Verify: true}); err != nil {
			if errors.Is(err, lower.ErrInternal) {
				t.Errorf("lowering failed internally: %v\nprogram:\n%s", err, src)
			}
			_ = lang.Render(err, g.Sources)
		}
	}
}
