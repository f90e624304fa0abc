package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/mesh"
	"github.com/stretchr/testify/require"
)

// dgx is an 8-GPU host whose GPUs (sm_90, PCIe Gen5 x16) each have 18
// NVLinks, all to NVSwitches (bus ids that are no GPU's); GPUs 0-3 and
// 4-7 share a NUMA node.
func dgx() *fakeGPUs {
	f := &fakeGPUs{pairs: map[[2]int]gpuPair{}}
	for i := range 8 {
		d := gpuDevice{Name: "NVIDIA H100 80GB HBM3", MemoryBytes: 80 << 30, Major: 9, BusID: fmt.Sprintf("00000000:%02X:00.0", 0x10+i),
			PCIeGen: 5, PCIeWidth: 16, NVLinkActive: 18}
		for l := range 18 {
			d.NVLinkPeers = append(d.NVLinkPeers, fmt.Sprintf("00000000:%02X:00.0", 0xC0+l%4)) // 4 switches
		}
		f.devs = append(f.devs, d)
		for j := range 8 {
			lvl := "NODE"
			if i/4 != j/4 {
				lvl = "SYS"
			}
			f.pairs[[2]int{i, j}] = gpuPair{Level: lvl, P2P: true}
		}
	}
	return f
}

// pcieBox is 4 GPUs without NVLink (sm_89, PCIe Gen4 x16): 0-1 and 2-3
// behind one switch each, the two switches on different sockets.
func pcieBox() *fakeGPUs {
	f := &fakeGPUs{pairs: map[[2]int]gpuPair{}}
	for i := range 4 {
		f.devs = append(f.devs, gpuDevice{Name: "NVIDIA L4", Major: 8, Minor: 9, BusID: fmt.Sprintf("00000000:%02X:00.0", 1+i), PCIeGen: 4, PCIeWidth: 16})
		for j := range 4 {
			lvl := "SYS"
			if i/2 == j/2 {
				lvl = "PIX"
			}
			f.pairs[[2]int{i, j}] = gpuPair{Level: lvl}
		}
	}
	return f
}

// gpuLinks checks src and returns the link model --link links gives its
// mesh on the host f, and the notes.
func gpuLinks(t *testing.T, f *fakeGPUs, src, links string) (*mesh.Topology, string, error) {
	t.Helper()
	old := newGPUSource
	t.Cleanup(func() { newGPUSource = old })
	newGPUSource = func() gpuSource { return f }
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	c := common{alphaUs: 5, bandwidth: 100, links: links}
	var notes bytes.Buffer
	topo, err := c.topology(g, &notes)
	return topo, notes.String(), err
}

// us and gbps read a link back in the flags' units.
func us(l mesh.Link) float64   { return l.Alpha * 1e6 }
func gbps(l mesh.Link) float64 { return 1 / l.Beta / 1e9 }

const twoAxes = "mesh M = [dp=%d, tp=%d]\ninput x : f32[8, 8] {S(0), S(1)} = ones\noutput x\n"

func TestLinkGPUsNVSwitch(t *testing.T) {
	topo, notes, err := gpuLinks(t, dgx(), fmt.Sprintf(twoAxes, 2, 4), "gpus")
	require.NoError(t, err)
	for a, name := range []string{"dp", "tp"} {
		// 18 links of 25 GB/s each way through the switches
		require.InDelta(t, 450, gbps(topo.Links[a]), 1e-9, name)
		require.InDelta(t, 3, us(topo.Links[a]), 1e-9, name)
	}
	require.Contains(t, notes, "tp: 18 NVLinks through NVSwitch (3 us, 450 GB/s")

	// 32 devices on 8 GPUs a host: tp stays on a host, dp leaves it
	topo, notes, err = gpuLinks(t, dgx(), fmt.Sprintf(twoAxes, 4, 8), "gpus")
	require.NoError(t, err)
	require.InDelta(t, 450, gbps(topo.Links[1]), 1e-9)
	require.InDelta(t, 100, gbps(topo.Links[0]), 1e-9, "the default link")
	require.InDelta(t, 5, us(topo.Links[0]), 1e-9)
	require.Contains(t, notes, "dp: leaves this host (8 GPUs)")
	require.Contains(t, notes, "--link dp=ALPHA_US:GBPS")

	// ... unless --link gives it
	topo, notes, err = gpuLinks(t, dgx(), fmt.Sprintf(twoAxes, 4, 8), "gpus,dp=25:12.5")
	require.NoError(t, err)
	require.InDelta(t, 12.5, gbps(topo.Links[0]), 1e-9)
	require.InDelta(t, 25, us(topo.Links[0]), 1e-9)
	require.InDelta(t, 450, gbps(topo.Links[1]), 1e-9)
	require.Contains(t, notes, "dp: as --link gives it")
}

func TestLinkGPUsPCIe(t *testing.T) {
	topo, notes, err := gpuLinks(t, pcieBox(), fmt.Sprintf(twoAxes, 2, 2), "gpus")
	require.NoError(t, err)
	// tp joins 0-1 and 2-3 (one switch each), dp 0-2 and 1-3 (across
	// sockets); 16 Gen4 lanes of 1.969 GB/s either way
	require.InDelta(t, 16*1.969, gbps(topo.Links[1]), 1e-9)
	require.InDelta(t, 5, us(topo.Links[1]), 1e-9)
	require.InDelta(t, 16*1.969, gbps(topo.Links[0]), 1e-9)
	require.InDelta(t, 12, us(topo.Links[0]), 1e-9)
	require.Contains(t, notes, "tp: PCIe Gen4 x16, PIX")
	require.Contains(t, notes, "dp: PCIe Gen4 x16, SYS")
}

// Two GPUs joined directly by 4 NVLinks, a third on PCIe only: an axis
// over all three takes the slowest neighbour pair.
func TestLinkGPUsDirectNVLinkAndTheSlowestPair(t *testing.T) {
	f := &fakeGPUs{
		devs: []gpuDevice{
			{Major: 9, BusID: "00000000:19:00.0", NVLinkActive: 4, NVLinkPeers: []string{"0000:3B:00.0", "0000:3B:00.0", "0000:3B:00.0", "0000:3B:00.0"}, PCIeGen: 5, PCIeWidth: 16},
			{Major: 9, BusID: "00000000:3b:00.0", NVLinkActive: 4, NVLinkPeers: []string{"0000:19:00.0", "0000:19:00.0", "0000:19:00.0", "0000:19:00.0"}, PCIeGen: 5, PCIeWidth: 16},
			{Major: 8, BusID: "00000000:86:00.0", PCIeGen: 4, PCIeWidth: 8},
		},
		pairs: map[[2]int]gpuPair{
			{0, 1}: {Level: "NODE"}, {1, 0}: {Level: "NODE"}, {0, 2}: {Level: "SYS"}, {2, 0}: {Level: "SYS"},
			{1, 2}: {Level: "PHB"}, {2, 1}: {Level: "PHB"},
		},
	}
	topo, notes, err := gpuLinks(t, f, "mesh M = [tp=2]\ninput x : f32[8] {S(0)} = ones\noutput x\n", "gpus")
	require.NoError(t, err)
	require.InDelta(t, 100, gbps(topo.Links[0]), 1e-9, "4 links of 25 GB/s")
	require.Contains(t, notes, "tp: NV4 (3 us, 100 GB/s")
	topo, notes, err = gpuLinks(t, f, "mesh M = [tp=3]\ninput x : f32[9] {S(0)} = ones\noutput x\n", "gpus")
	require.NoError(t, err)
	// 1-2 and 2-0 are the narrower GPU's 8 Gen4 lanes; 2-0 is the farther
	require.InDelta(t, 8*1.969, gbps(topo.Links[0]), 1e-9)
	require.InDelta(t, 12, us(topo.Links[0]), 1e-9)
	require.Contains(t, notes, "tp: PCIe Gen4 x8, SYS")
}

// With a pipeline axis, devices are numbered over the declared mesh, so
// the stages' tp groups sit on GPUs 0-3 and 4-7.
func TestLinkGPUsPipelineAxis(t *testing.T) {
	f := dgx()
	for i := range f.devs { // direct links instead: 0-3 and 4-7 fully joined by one link each
		f.devs[i].NVLinkPeers = nil
		for j := range f.devs {
			if j != i && j/4 == i/4 {
				f.devs[i].NVLinkPeers = append(f.devs[i].NVLinkPeers, f.devs[j].BusID)
			}
		}
	}
	src := `mesh M = [pipeline pp=2, tp=4]
input x : f32[8, 8] {B} = ones
input y : f32[8, 8] {B} = ones
param W : f32[8, 8] {S(1)} = ones
param V : f32[8, 8] {S(0)} = ones
train {
    h = x @ W
    stage = 1
    loss = mse(h @ V, y)
    microbatches = 2
    optimizer = sgd(lr=0.1)
    steps = 1
}
`
	topo, notes, err := gpuLinks(t, f, src, "gpus")
	require.NoError(t, err, notes)
	require.Len(t, topo.Links, 1)
	require.InDelta(t, 25, gbps(topo.Links[0]), 1e-9, "NV1 within each stage's four GPUs")
	require.Contains(t, notes, "device r of [pp=2, tp=4] on GPU r mod 8")
}

func TestLinkGPUsWithoutDriver(t *testing.T) {
	_, _, err := gpuLinks(t, &fakeGPUs{openErr: errNoDriver}, fmt.Sprintf(twoAxes, 2, 2), "gpus")
	require.EqualError(t, err, "--link gpus: "+errNoDriver.Error())
	_, _, err = gpuLinks(t, &fakeGPUs{}, fmt.Sprintf(twoAxes, 2, 2), "gpus")
	require.EqualError(t, err, "--link gpus: NVML sees no GPU here")
}

// explain shows the discovered links in its header, and the notes go to
// stderr.
func TestExplainLinkGPUs(t *testing.T) {
	old := newGPUSource
	t.Cleanup(func() { newGPUSource = old })
	newGPUSource = func() gpuSource { return dgx() }
	f := writeFile(t, t.TempDir(), "m.mesh", fmt.Sprintf(twoAxes, 2, 4))
	code, out, errs := meshrun(t, "", "explain", f, "--link", "gpus")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "link tp   alpha 3.0 us, 450 GB/s")
	require.True(t, strings.HasPrefix(errs, "meshrun: --link gpus: device r of [dp=2, tp=4] on GPU r mod 8 of host r div 8\n"), errs)
	newGPUSource = func() gpuSource { return &fakeGPUs{openErr: errNoDriver} }
	code, _, errs = meshrun(t, "", "explain", f, "--link", "gpus")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "--link gpus: no NVIDIA driver found")
}
