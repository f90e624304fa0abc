// Command blasinfo prints the BLAS meshrun's CPU backend would use here,
// with its build, kernels and thread count, so that every benchmark can
// say which BLAS ran (go run ./bench/blasinfo; GOMAXPROCS and
// MESHRUN_BLAS_THREADS set OpenBLAS's threads as they do for meshrun).
// With -coretype it prints only the OPENBLAS_CORETYPE meshrun loaded
// OpenBLAS with, for a script to hand the same kernels to PyTorch.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/meshrun/meshrun/rt"
)

func main() {
	coretype := flag.Bool("coretype", false, "print only the OPENBLAS_CORETYPE meshrun chose (empty: OpenBLAS's own choice)")
	flag.Parse()
	b := rt.DefaultBLAS()
	if *coretype {
		fmt.Println(os.Getenv("OPENBLAS_CORETYPE"))
		return
	}
	fmt.Println("meshrun BLAS:", rt.DescribeBLAS(b))
}
