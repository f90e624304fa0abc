package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// `meshrun devices` lists the NVIDIA GPUs that NVML sees and how they are
// connected; `--link gpus` (links_gpu.go) turns the same facts into the
// cost model's links, and `--backend cuda` runs on one of the GPUs. The
// NVML calls go through gpuSource so the listing, the topology matrix and
// the links are tested with a fake; devices_nvml.go is the real one.

// errNoDriver is what gpuSource.Open returns when the NVML library itself
// cannot be loaded (as opposed to a driver that loads but fails).
var errNoDriver = errors.New("no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)")

// errDriverNotRunning: the library loads but the kernel module is absent
// (a container or machine with the user-space driver only).
var errDriverNotRunning = errors.New("no NVIDIA driver running (libnvidia-ml.so.1 loads, but the kernel driver is not loaded)")

// newGPUSource is NVML, or what a test puts in its place.
var newGPUSource = newNVMLSource

// gpuSource is the part of NVML that `devices` and `--link gpus` use.
type gpuSource interface {
	Open() error // errNoDriver or errDriverNotRunning: an answer, not a failure
	Close()
	Driver() string // driver version, "" when unknown
	Count() (int, error)
	Device(i int) (gpuDevice, error)
	Pair(i, j int) (gpuPair, error)
}

// gpuDevice is one GPU as NVML describes it.
type gpuDevice struct {
	Name         string
	MemoryBytes  uint64
	Major, Minor int      // CUDA compute capability
	BusID        string   // PCI bus id, e.g. 00000000:19:00.0
	NVLinkPeers  []string // PCI bus id at the far end of each active NVLink
	NVLinkActive int      // active NVLinks (to GPUs or NVSwitches)
	PCIeGen      int      // the PCIe link's maximum generation (0: unknown)
	PCIeWidth    int      // and width in lanes
}

// gpuPair is how two GPUs reach each other.
type gpuPair struct {
	Level string // common PCIe ancestor, nvidia-smi's words: PIX PXB PHB NODE SYS
	P2P   bool   // peer-to-peer reads are possible (NVML's P2P read status)
}

func (e *env) devices(args []string) int {
	fs := newFlags(e, "devices", "devices")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "meshrun devices: takes no arguments (got %q)\n", pos[0])
		return ExitUsage
	}
	if err := listDevices(e.stdout, newGPUSource()); err != nil {
		fmt.Fprintln(e.stderr, "meshrun devices:", err)
		return ExitFailure
	}
	return ExitOK
}

// listDevices writes the listing. No driver and no GPU are answers, not
// failures: they are printed and nil is returned.
func listDevices(w io.Writer, src gpuSource) error {
	if err := src.Open(); err != nil {
		if errors.Is(err, errNoDriver) || errors.Is(err, errDriverNotRunning) {
			fmt.Fprintln(w, err)
			fmt.Fprintln(w, "no GPU: meshrun runs on its CPU backend (--backend cuda needs the driver)")
			return nil
		}
		return err
	}
	defer src.Close()
	n, err := src.Count()
	if err != nil {
		return err
	}
	drv := src.Driver()
	if drv != "" {
		drv = "NVIDIA driver " + drv + ": "
	}
	if n == 0 {
		fmt.Fprintf(w, "%sno GPU\n", drv)
		return nil
	}
	devs := make([]gpuDevice, n)
	for i := range devs {
		if devs[i], err = src.Device(i); err != nil {
			return fmt.Errorf("GPU %d: %w", i, err)
		}
	}
	fmt.Fprintf(w, "%s%d GPU%s\n\n", drv, n, plural(n))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tname\tmemory\tcompute\tPCI bus id\tNVLinks")
	for i, d := range devs {
		fmt.Fprintf(tw, "%d\t%s\t%s\tsm_%d%d\t%s\t%d\n", i, d.Name, gib(d.MemoryBytes), d.Major, d.Minor, d.BusID, d.NVLinkActive)
	}
	tw.Flush()
	if n < 2 {
		return nil
	}
	return writeTopology(w, src, devs)
}

// writeTopology prints the n×n matrix in nvidia-smi topo -m's vocabulary:
// NV<k> when k NVLinks join the two GPUs directly, otherwise the PCIe
// path; "+p2p" marks pairs with peer-to-peer access.
func writeTopology(w io.Writer, src gpuSource, devs []gpuDevice) error {
	fmt.Fprintln(w, "\ntopology (NV<k>: k NVLinks between the two; else the PCIe path: BOARD one board, PIX one switch, PXB several switches, PHB a host bridge, NODE within a NUMA node, SYS across NUMA nodes; +p2p: peer-to-peer access)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{""}
	for i := range devs {
		head = append(head, fmt.Sprintf("GPU%d", i))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for i := range devs {
		row := []string{fmt.Sprintf("GPU%d", i)}
		for j := range devs {
			if i == j {
				row = append(row, "X")
				continue
			}
			p, err := src.Pair(i, j)
			if err != nil {
				return fmt.Errorf("GPU %d and %d: %w", i, j, err)
			}
			cell := p.Level
			if k := linksBetween(devs[i], devs[j]); k > 0 {
				cell = fmt.Sprintf("NV%d", k)
			}
			if p.P2P {
				cell += "+p2p"
			}
			row = append(row, cell)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// linksBetween counts a's NVLinks whose far end is b. Links through an
// NVSwitch end at the switch, so such GPUs show their PCIe path instead
// (NVML reports the switch's bus id, which is no GPU's).
func linksBetween(a, b gpuDevice) int {
	k := 0
	for _, p := range a.NVLinkPeers {
		if sameBusID(p, b.BusID) {
			k++
		}
	}
	return k
}

// sameBusID compares PCI bus ids ignoring case and the domain's width
// (NVML writes 00000000:19:00.0 in one place and 0000:19:00.0 in another).
func sameBusID(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(s)
		if dom, rest, ok := strings.Cut(s, ":"); ok {
			return strings.TrimLeft(dom, "0") + ":" + rest
		}
		return s
	}
	return norm(a) == norm(b)
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// topologyLevel names NVML's GpuTopologyLevel values as nvidia-smi does
// (0, two GPUs on one board, has no nvidia-smi word: "BOARD").
func topologyLevel(v int) string {
	switch v {
	case 0:
		return "BOARD"
	case 10:
		return "PIX"
	case 20:
		return "PXB"
	case 30:
		return "PHB"
	case 40:
		return "NODE"
	case 50:
		return "SYS"
	}
	return fmt.Sprintf("level%d", v)
}
