//go:build !(cgo && linux)

package cli

import "fmt"

// Without cgo (or off Linux) go-nvml cannot load libnvidia-ml, so this
// build can see no GPU; it says why.
type noNVML struct{}

func newNVMLSource() gpuSource { return noNVML{} }

func (noNVML) Open() error {
	return fmt.Errorf("%w: this meshrun was built without cgo, which NVML needs", errNoDriver)
}
func (noNVML) Close()                         {}
func (noNVML) Driver() string                 { return "" }
func (noNVML) Count() (int, error)            { return 0, nil }
func (noNVML) Device(int) (gpuDevice, error)  { return gpuDevice{}, nil }
func (noNVML) Pair(int, int) (gpuPair, error) { return gpuPair{}, nil }
