package cli

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshrun/meshrun/internal/atomicfile"
	"github.com/meshrun/meshrun/lower"
)

// Every flag and every output path is checked before any work: a typo in
// a flag must not cost a long run its result. Each command has one place
// that checks its flags (common.validate for the shared ones, then the
// command's own function); problems are collected in checks and reported
// together as a usage error (exit 2).

// checks collects what is wrong with a command line.
type checks struct {
	cmd  string
	set  map[string]bool // flags given on the command line
	errs []string
	// noPaths skips the output path checks: an MPI follower writes no
	// file (rank 0's process does), and its host may not have the paths.
	noPaths bool
}

func newChecks(e *env, fs *flag.FlagSet) *checks {
	k := &checks{cmd: fs.Name(), set: map[string]bool{}, noPaths: e.follower}
	fs.Visit(func(f *flag.Flag) { k.set[f.Name] = true })
	return k
}

// flagName writes a flag as its help does: -o, --out.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func (k *checks) fail(format string, a ...any) {
	k.errs = append(k.errs, fmt.Sprintf(format, a...))
}

// report prints every problem; it returns false when there were some.
func (e *env) report(k *checks) bool {
	for _, msg := range k.errs {
		fmt.Fprintf(e.stderr, "meshrun %s: %s\n", k.cmd, msg)
	}
	if len(k.errs) > 0 {
		fmt.Fprintf(e.stderr, "(meshrun %s --help lists the flags)\n", k.cmd)
	}
	return len(k.errs) == 0
}

// number checks that a float flag is finite and at least lo (above lo
// when strict).
func (k *checks) number(name string, v, lo float64, strict bool) {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		k.fail("%s %g: want a finite number", flagName(name), v)
	case strict && v <= lo:
		k.fail("%s %g: want a number above %g", flagName(name), v, lo)
	case v < lo:
		k.fail("%s %g: want a number of at least %g", flagName(name), v, lo)
	}
}

// empty reports a path flag given as an empty string (--out ""), which
// would otherwise mean "not given" and silently write nothing.
func (k *checks) empty(name, v string) bool {
	if k.set[name] && v == "" {
		k.fail("%s: the path is empty", flagName(name))
		return true
	}
	return false
}

// outDir checks a directory flag that files are written into (the
// writers make it when missing).
func (k *checks) outDir(name, dir string) {
	if k.empty(name, dir) || dir == "" || k.noPaths {
		return
	}
	if err := atomicfile.CheckDir(dir); err != nil {
		k.fail("%s %s: cannot write files there: %v", flagName(name), dir, unwrapPath(err))
	}
}

// outFile checks a file flag: not a directory, and its directory exists
// and is writable.
func (k *checks) outFile(name, path string) {
	if k.empty(name, path) || path == "" || k.noPaths {
		return
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		k.fail("%s %s: is a directory, want a file name", flagName(name), path)
		return
	}
	if err := checkFileDir(filepath.Dir(path)); err != nil {
		k.fail("%s %s: cannot write the file: %v", flagName(name), path, unwrapPath(err))
	}
}

// checkFileDir checks the directory of an output file, which the
// writers do not make: it must exist and be writable.
func checkFileDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return atomicfile.CheckDir(dir)
}

// unwrapPath drops the probe file's name from an error: the user needs
// the reason (permission denied, not a directory), not our temp name.
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		if strings.Contains(filepath.Base(pe.Path), ".meshrun-probe-") {
			return pe.Err
		}
		return err
	}
	return err
}

// validate checks the flags every program-taking command shares.
func (c *common) validate(k *checks) {
	if c.devices < 1 {
		k.fail("--devices %d: want at least 1 (the virtual devices a mesh may use)", c.devices)
	}
	if c.timeout < 0 {
		k.fail("--timeout %v: want a duration of at least 0 (0 means the default, 60s)", c.timeout)
	}
	k.number("alpha", c.alphaUs, 0, false)
	k.number("bandwidth", c.bandwidth, 0, true)
	passes := append([]string{"all"}, passNames()...)
	if c.dumpAfter != "" && !slices.Contains(passes, c.dumpAfter) || k.set["dump-after"] && c.dumpAfter == "" {
		k.fail("--dump-after %q: want one of %s", c.dumpAfter, strings.Join(passes, ", "))
	}
	if _, err := c.launchMode(); err != nil {
		k.fail("%v", err)
	}
	if !validBackend(c.backend) {
		k.fail("--backend %q: want cpu, cuda or auto", c.backend)
	}
	if c.tf32 && (c.backend == "" || c.backend == "cpu") {
		k.fail("--tf32 is a GPU matmul mode (TF32 tensor cores): it needs --backend cuda or auto; the CPU's f32 matmuls are f32")
	}
}

// passNames are the lowering passes' names, in order (lower.Passes): what
// --dump-after takes, besides "all".
func passNames() []string {
	names := make([]string, len(lower.Passes))
	for i, p := range lower.Passes {
		names[i] = p.Name
	}
	return names
}
