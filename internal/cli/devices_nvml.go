//go:build cgo && linux

package cli

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlSource is gpuSource over go-nvml, which dlopens libnvidia-ml.so.1 at
// run time: building needs nothing from NVIDIA, and a machine without the
// driver gets errNoDriver from Open.
type nvmlSource struct {
	lib  nvml.Interface
	devs []nvml.Device
}

func newNVMLSource() gpuSource { return &nvmlSource{lib: nvml.New()} }

func nvmlErr(what string, r nvml.Return) error {
	return fmt.Errorf("NVML %s: %s", what, r.Error())
}

func (s *nvmlSource) Open() error {
	r := s.lib.Init()
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return errNoDriver
	}
	if r == nvml.ERROR_DRIVER_NOT_LOADED {
		return errDriverNotRunning
	}
	if r != nvml.SUCCESS {
		return nvmlErr("init", r)
	}
	return nil
}

func (s *nvmlSource) Close() { s.lib.Shutdown() }

func (s *nvmlSource) Driver() string {
	v, r := s.lib.SystemGetDriverVersion()
	if r != nvml.SUCCESS {
		return ""
	}
	return v
}

func (s *nvmlSource) Count() (int, error) {
	n, r := s.lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return 0, nvmlErr("device count", r)
	}
	s.devs = make([]nvml.Device, n)
	for i := range s.devs {
		if s.devs[i], r = s.lib.DeviceGetHandleByIndex(i); r != nvml.SUCCESS {
			return 0, nvmlErr(fmt.Sprintf("device %d", i), r)
		}
	}
	return n, nil
}

func (s *nvmlSource) Device(i int) (gpuDevice, error) {
	d := s.devs[i]
	var g gpuDevice
	var r nvml.Return
	if g.Name, r = d.GetName(); r != nvml.SUCCESS {
		return g, nvmlErr("name", r)
	}
	mem, r := d.GetMemoryInfo()
	if r != nvml.SUCCESS {
		return g, nvmlErr("memory", r)
	}
	g.MemoryBytes = mem.Total
	if g.Major, g.Minor, r = d.GetCudaComputeCapability(); r != nvml.SUCCESS {
		return g, nvmlErr("compute capability", r)
	}
	pci, r := d.GetPciInfo()
	if r != nvml.SUCCESS {
		return g, nvmlErr("PCI info", r)
	}
	g.BusID = cString(pci.BusId[:])
	// the link's capability, not its current (power-saving) state
	if gen, r := d.GetMaxPcieLinkGeneration(); r == nvml.SUCCESS {
		g.PCIeGen = gen
	}
	if w, r := d.GetMaxPcieLinkWidth(); r == nvml.SUCCESS {
		g.PCIeWidth = w
	}
	// A GPU without NVLink answers NOT_SUPPORTED for link 0; links that
	// are absent or down are skipped.
	for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
		st, r := d.GetNvLinkState(l)
		if r != nvml.SUCCESS || st != nvml.FEATURE_ENABLED {
			continue
		}
		g.NVLinkActive++
		if far, r := d.GetNvLinkRemotePciInfo(l); r == nvml.SUCCESS {
			g.NVLinkPeers = append(g.NVLinkPeers, cString(far.BusId[:]))
		}
	}
	return g, nil
}

func (s *nvmlSource) Pair(i, j int) (gpuPair, error) {
	lvl, r := s.lib.DeviceGetTopologyCommonAncestor(s.devs[i], s.devs[j])
	if r != nvml.SUCCESS {
		return gpuPair{}, nvmlErr("topology", r)
	}
	p2p, r := s.lib.DeviceGetP2PStatus(s.devs[i], s.devs[j], nvml.P2P_CAPS_INDEX_READ)
	if r != nvml.SUCCESS {
		return gpuPair{}, nvmlErr("P2P status", r)
	}
	return gpuPair{Level: topologyLevel(int(lvl)), P2P: p2p == nvml.P2P_STATUS_OK}, nil
}

// cString reads NVML's NUL-terminated char arrays.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}
