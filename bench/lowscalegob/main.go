// Command lowscalegob lowers a program and writes the gob encoding of its
// executable plan (plan.Marshal) to stdout, or the error to stderr:
// bench/lowscale_same.sh builds it from two revisions and compares the
// bytes, since explain's text and JSON do not show every field of a plan.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
)

func main() {
	devices := flag.Int("devices", 0, "the devices the run may use (0: no limit)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: lowscalegob [-devices N] FILE")
		os.Exit(2)
	}
	p, _, err := lower.CompileFile(flag.Arg(0), lang.CheckOptions{Devices: *devices}, lower.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	data, err := plan.Marshal(p.Exec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(data)
}
