package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
)

// `--link gpus` takes each mesh axis's link from the GPUs NVML sees on this
// host, the way NCCL's topology search starts from the same facts. The
// mesh is laid out as an MPI launch lays it: device r (row-major over the
// declared mesh, pipeline axis included) runs on GPU r mod G of host
// r div G, with G the GPUs here. An axis whose neighbours (each device and
// the next one along the axis, as a ring visits them) all share a host
// gets the slowest link among those pairs:
//
//   - two GPUs joined by k NVLinks: k links' bandwidth;
//   - two GPUs whose NVLinks all end at NVSwitches: the fewer of the two
//     GPUs' active links (a switch forwards at full link rate);
//   - otherwise their PCIe path: the narrower GPU's PCIe bandwidth
//     (generation × width), with a latency by how far apart they are.
//
// An axis that leaves the host keeps the link --link gives it, else the
// default, and the note says so: NVML cannot see other hosts.
//
// The per-link rates are the nominal ones NVIDIA states, per direction
// (what a ring's step moves), chosen by compute capability; the latencies
// are nominal too. They are a model's inputs, not measurements.

// nvlinkGBps is one NVLink's bandwidth per direction for a GPU of compute
// capability major.minor: NVLink 1 (sm_60) 20 GB/s, NVLink 2-4 (sm_70 to
// sm_90) 25 GB/s, the 4-link bridges of sm_86 boards 14.0625 GB/s, NVLink 5
// (sm_100 and later) 50 GB/s.
func nvlinkGBps(major, minor int) float64 {
	switch {
	case major >= 10:
		return 50
	case major == 8 && minor == 6:
		return 14.0625
	case major >= 7:
		return 25
	}
	return 20
}

// pcieLaneGBps is one PCIe lane's bandwidth per direction after encoding,
// by generation.
var pcieLaneGBps = map[int]float64{1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

// Nominal latencies of a step between two GPUs, by what joins them.
const (
	nvlinkAlphaUs = 3
	pcieAlphaUs   = 5  // one switch or board (BOARD, PIX, PXB)
	hostAlphaUs   = 8  // through the host bridge or within a NUMA node (PHB, NODE)
	socketAlphaUs = 12 // across sockets (SYS)
)

// gpuLink is how two GPUs of this host reach each other, in the cost
// model's terms, and in words for the note.
type gpuLink struct {
	alphaUs, gbps float64
	what          string
}

// hostGPUs is what --link gpus reads from NVML once.
type hostGPUs struct {
	devs  []gpuDevice
	pairs map[[2]int]gpuPair
}

func readHostGPUs(src gpuSource) (*hostGPUs, error) {
	if err := src.Open(); err != nil {
		return nil, err
	}
	defer src.Close()
	n, err := src.Count()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("NVML sees no GPU here")
	}
	h := &hostGPUs{devs: make([]gpuDevice, n), pairs: map[[2]int]gpuPair{}}
	for i := range h.devs {
		if h.devs[i], err = src.Device(i); err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
	}
	for i := range h.devs {
		for j := range h.devs {
			if i != j {
				if h.pairs[[2]int{i, j}], err = src.Pair(i, j); err != nil {
					return nil, fmt.Errorf("GPU %d and %d: %w", i, j, err)
				}
			}
		}
	}
	return h, nil
}

// link is the link between GPUs i and j of this host.
func (h *hostGPUs) link(i, j int) gpuLink {
	a, b := h.devs[i], h.devs[j]
	rate := min(nvlinkGBps(a.Major, a.Minor), nvlinkGBps(b.Major, b.Minor))
	if k := linksBetween(a, b); k > 0 {
		return gpuLink{nvlinkAlphaUs, float64(k) * rate, fmt.Sprintf("NV%d", k)}
	}
	if sa, sb := h.switchLinks(a), h.switchLinks(b); sa > 0 && sb > 0 {
		k := min(sa, sb)
		return gpuLink{nvlinkAlphaUs, float64(k) * rate, fmt.Sprintf("%d NVLinks through NVSwitch", k)}
	}
	level := h.pairs[[2]int{i, j}].Level
	alpha := map[string]float64{"BOARD": pcieAlphaUs, "PIX": pcieAlphaUs, "PXB": pcieAlphaUs, "PHB": hostAlphaUs, "NODE": hostAlphaUs}[level]
	if alpha == 0 {
		alpha = socketAlphaUs
	}
	gen, width := min(a.PCIeGen, b.PCIeGen), min(a.PCIeWidth, b.PCIeWidth)
	gbps := pcieLaneGBps[gen] * float64(width)
	if gbps == 0 { // NVML did not say: assume Gen3 x16, the slowest a data-centre GPU sits on
		gen, width, gbps = 3, 16, pcieLaneGBps[3]*16
	}
	return gpuLink{alpha, gbps, fmt.Sprintf("PCIe Gen%d x%d, %s", gen, width, level)}
}

// switchLinks counts d's active NVLinks that end at no GPU of this host:
// at an NVSwitch. Zero when any link ends at a GPU (a direct mesh of links).
func (h *hostGPUs) switchLinks(d gpuDevice) int {
	k := 0
	for _, p := range d.NVLinkPeers {
		for _, o := range h.devs {
			if sameBusID(p, o.BusID) {
				return 0
			}
		}
		k++
	}
	return k
}

// gpuTopology sets, in t, the link of every axis of g's mesh whose
// neighbours share this host, leaving the axes in keep (set by --link)
// alone; it writes one line per axis to notes.
func gpuTopology(t *mesh.Topology, g *ir.Graph, h *hostGPUs, keep map[int]bool, notes io.Writer) {
	full, offset := g.Mesh, func(a int) int { return a }
	if p := g.Pipeline; p != nil {
		full = p.Full
		offset = func(a int) int {
			if a >= p.Axis {
				return a + 1
			}
			return a
		}
	}
	n := len(h.devs)
	fmt.Fprintf(notes, "meshrun: --link gpus: device r of %s on GPU r mod %d of host r div %d\n", full, n, n)
	for a, ax := range g.Mesh.Axes {
		fa := offset(a)
		worst, hosts := gpuLink{}, false
		for d := 0; d < full.Size() && ax.Size > 1; d++ {
			c := full.Coord(d)
			c[fa] = (c[fa] + 1) % ax.Size
			e := full.Device(c)
			if d/n != e/n {
				hosts = true
				break
			}
			l := h.link(d%n, e%n)
			if worst.gbps == 0 || l.gbps < worst.gbps || (l.gbps == worst.gbps && l.alphaUs > worst.alphaUs) {
				worst = l
			}
		}
		switch {
		case keep[a]:
			fmt.Fprintf(notes, "  %s: as --link gives it\n", ax.Name)
		case ax.Size == 1:
			fmt.Fprintf(notes, "  %s: one device, no link\n", ax.Name)
		case hosts:
			l := t.Links[a]
			fmt.Fprintf(notes, "  %s: leaves this host (%d GPU%s), which NVML cannot see past: the default link (%g us, %g GB/s); give it with --link %s=ALPHA_US:GBPS\n",
				ax.Name, n, plural(n), l.Alpha*1e6, 1/l.Beta/1e9, ax.Name)
		default:
			t.Links[a] = mesh.Link{Alpha: worst.alphaUs * 1e-6, Beta: 1 / (worst.gbps * 1e9), Gamma: t.Links[a].Gamma}
			fmt.Fprintf(notes, "  %s: %s (%g us, %g GB/s, the slowest of its neighbours)\n", ax.Name, worst.what, worst.alphaUs, worst.gbps)
		}
	}
}

// splitGPUs removes the "gpus" part from a --link value, saying whether
// it was there.
func splitGPUs(links string) (rest string, gpus bool) {
	var keep []string
	for _, part := range strings.Split(links, ",") {
		if strings.TrimSpace(part) == "gpus" {
			gpus = true
			continue
		}
		keep = append(keep, part)
	}
	return strings.Join(keep, ","), gpus
}
