// Command gptgen prints the GPT-like program of package gptsrc (used by
// bench/lowscale.sh to time `meshrun explain` on 4096 devices).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/meshrun/meshrun/bench/gptsrc"
)

func main() {
	layers := flag.Int("layers", 12, "transformer blocks")
	mesh := flag.String("mesh", "3d", "3d: [dp=64, pipeline pp=8, tp=8]; 2d: [dp=512, tp=8]")
	flag.Parse()
	if *layers < 1 || (*mesh != "3d" && *mesh != "2d") {
		fmt.Fprintln(os.Stderr, "gptgen: -layers ≥ 1 and -mesh 3d|2d")
		os.Exit(2)
	}
	gptsrc.Write(os.Stdout, *layers, *mesh == "3d")
}
