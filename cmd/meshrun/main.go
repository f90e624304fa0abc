// Command meshrun runs, checks and explains .mesh programs, and hosts a
// REPL for sharding experiments. It is a thin shell over the packages:
// lang.Parse → lang.Check → lower.Lower → rt.Run.
package main

import (
	"os"

	"github.com/meshrun/meshrun/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
