//go:build !(cgo && linux)

package rt

import "fmt"

// LoadOpenBLAS needs cgo (for dlopen); without it the gonum BLAS is used.
func LoadOpenBLAS() (BLAS, error) {
	return nil, fmt.Errorf("OpenBLAS needs a cgo build on linux")
}

// shareBLASThreads has nothing to share without OpenBLAS.
func shareBLASThreads(int) {}
