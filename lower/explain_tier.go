package lower

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Explain's view of ZeRO-Offload's host tier (the tier pass): each
// device's memory table splits into its device memory and its host
// memory, in the same categories, and the step's copies between them.

// HostMemoryReport is one device's host tier in a training step with
// offload: what it holds between steps (master weights, optimizer
// states), the gradients it receives, the rest of its peak (the update's
// temporaries), and the bytes the step copies each way.
type HostMemoryReport struct {
	PeakBytes      int64 `json:"peak_bytes"`
	ParamBytes     int64 `json:"param_bytes"`
	OptimizerBytes int64 `json:"optimizer_bytes"`
	GradientBytes  int64 `json:"gradient_bytes"`
	OtherBytes     int64 `json:"other_bytes"`
	// ToHostBytes and ToDeviceBytes are the bytes the device's offload
	// and fetch instructions copy per step (from the plan; the runtime
	// measures the same, DeviceStats.ToHost and ToDevice).
	ToHostBytes   int64 `json:"to_host_bytes"`
	ToDeviceBytes int64 `json:"to_device_bytes"`
}

// offloadedGrads are the reduced gradients the device holds until the
// step copies them to the host: the arguments of its offload values. With
// ZeRO-2/3 the backward sends each one the moment it reduces it, so the
// device holds none (one at a time, transiently: "activations and
// other"), as estimate's offload row counts.
func offloadedGrads(p *Plan) []*ir.Value {
	if t := p.Graph.Train; t == nil || t.Zero >= 2 {
		return nil
	}
	var out []*ir.Value
	for _, v := range p.Values {
		if v.Op == "offload" {
			out = append(out, v.Args[0])
		}
	}
	return out
}

// offloadGradBytes is, under offload, the gradient bytes a device holds
// in each tier: the reduced gradients its device keeps until they leave
// (offloadedGrads) and the gradients its host receives, as received (the
// offload results, in the precision they were reduced in; their f32 cast
// is one of the update's temporaries), as estimate counts them: each
// parameter's once, though ZeRO-2/3 with micro-batches offload a piece
// per micro-batch (the host adds them up as they come; summing every
// piece counted a 2 TiB column beside a 160 GiB peak).
func offloadGradBytes(p *Plan, local func(*ir.Value) int64) (device, host int64) {
	for _, g := range offloadedGrads(p) {
		device += local(g)
	}
	each := map[string]int64{} // the parameter's gradient, by the offload's name
	for _, v := range p.Values {
		if v.Op == "offload" {
			each[v.Name] = max(each[v.Name], local(v))
		}
	}
	for _, b := range each {
		host += b
	}
	return device, host
}

// hostMemory is device d's host tier, or nil without offload.
func hostMemory(p *Plan, d int, h heldBytes) *HostMemoryReport {
	if p.HostPeak == nil {
		return nil
	}
	hr := &HostMemoryReport{PeakBytes: p.HostPeak[d], ParamBytes: h.hostParam, OptimizerBytes: h.hostOptimizer, GradientBytes: h.hostGradient}
	hr.OtherBytes = hr.PeakBytes - hr.ParamBytes - hr.OptimizerBytes
	hr.ToHostBytes, hr.ToDeviceBytes = CopiedBytes(p.Exec, d)
	return hr
}

// CopiedBytes is what rank r's offload and fetch instructions copy in one
// execution of its program: its local blocks' bytes.
func CopiedBytes(ex *plan.Plan, r int) (toHost, toDevice int64) {
	prog := ex.ProgramOf(r)
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Kind != plan.Offload && in.Kind != plan.Fetch {
			continue
		}
		n := localCopyBytes(ex, in, r)
		if in.Kind == plan.Offload {
			toHost += n
		} else {
			toDevice += n
		}
	}
	return toHost, toDevice
}

// localCopyBytes is what a copy instruction moves on rank r: its local
// block's bytes.
func localCopyBytes(ex *plan.Plan, in *plan.Instr, r int) int64 {
	return int64(sbp.Layout(ex.Mesh, in.Shape, in.Placement, r).Numel() * in.DType.Size())
}

const offloadHeading = "  (offload: parameters and optimizer states are kept in host memory and updated there; the device\n" +
	"   holds the copies it reads, under \"activations and other\"; gradients leave the device once reduced,\n" +
	"   with ZeRO-2/3 each the moment the backward reduces it)\n"

// tieredMemoryTable is explain's memory table with a device and a host
// row per group of devices with equal figures.
func tieredMemoryTable(ms []MemoryReport) *table {
	tw := newTable("devices", "memory", "parameters", "optimizer states", "gradients (reduced)", "activations and other", "peak", "copied per step")
	seen := map[string][]int{}
	var order []string
	for _, m := range ms {
		k := fmt.Sprint(m.ParamBytes, m.OptimizerBytes, m.GradientBytes, m.ActivationBytes, m.PeakBytes, *m.Host)
		if _, ok := seen[k]; !ok {
			order = append(order, k)
		}
		seen[k] = append(seen[k], m.Device)
	}
	hb := func(b int64) string { return HumanBytes(float64(b)) }
	for _, k := range order {
		m := ms[seen[k][0]]
		h := m.Host
		tw.row(DeviceRanges(seen[k]), "device", hb(m.ParamBytes), hb(m.OptimizerBytes), hb(m.GradientBytes), hb(m.ActivationBytes), hb(m.PeakBytes), hb(h.ToHostBytes)+" to host")
		tw.row("", "host", hb(h.ParamBytes), hb(h.OptimizerBytes), hb(h.GradientBytes), hb(h.OtherBytes), hb(h.PeakBytes), hb(h.ToDeviceBytes)+" to device")
	}
	return tw
}
