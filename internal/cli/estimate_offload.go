package cli

import (
	"fmt"
	"io"

	"github.com/meshrun/meshrun/lower"
)

// printOffloadEstimate writes estimate's offload row: ZeRO-2 with
// offload = optimizer, a device line and a host line in the main table's
// categories (and explain's: its tiered memory table has the same two
// lines per device), the bytes copied each way, and, given a link and a
// memory size, the seconds of its collectives and the fewest devices its
// device memory fits on.
func printOffloadEstimate(w io.Writer, cfg lower.EstimateConfig, dtype string, link, gpuMem float64) {
	o := lower.EstimateOffload(cfg)
	fmt.Fprintf(w, "\nwith offload = optimizer (ZeRO-Offload) on ZeRO-2: each device's host keeps its part of the f32 master weights,\n")
	read := dtype + " copy" // what the device keeps: the half copy, or (f32) the weights fetched whole
	if !cfg.Mixed() {
		read = "f32 weights read"
	}
	fmt.Fprintf(w, "the optimizer states and the gradients, and runs the update; the device keeps the %s:\n\n", read)
	gb := func(b float64) string { return fmt.Sprintf("%.2f GB", b/1e9) }
	cols := []string{"stage", "memory", "parameters", read, "gradients", "optimizer states", "total", "copied per step", "sent per device"}
	if link > 0 {
		cols = append(cols, fmt.Sprintf("at %g GB/s", link))
	}
	if gpuMem > 0 {
		cols = append(cols, fmt.Sprintf("fewest %g GB devices", gpuMem))
	}
	rows := [][]string{cols}
	d, h := o.Device, o.Host
	dev := []string{d.Name, "device", gb(d.Params), gb(d.Half), gb(d.Grads), gb(d.Optimizer), gb(d.Total), gb(o.Copied) + " to host", gb(d.Sent)}
	host := []string{"", "host", gb(h.Params), gb(h.Half), gb(h.Grads), gb(h.Optimizer), gb(h.Total), gb(o.Copied) + " to device", ""}
	if link > 0 {
		dev, host = append(dev, fmt.Sprintf("%.3g s", d.Sent/(link*1e9))), append(host, "")
	}
	if gpuMem > 0 {
		dev, host = append(dev, fewestText(lower.FewestDevicesOffload(cfg, gpuMem*1e9))), append(host, "")
	}
	rows = append(rows, dev, host)
	fmt.Fprint(w, lower.FormatTable(rows))
	fmt.Fprintf(w, "\ncopied per step: each device's part of the reduced gradients to its host and of the updated weights back,\n")
	fmt.Fprintf(w, "(Ψ/N)·%g bytes each way per device, %gΨ bytes over the N devices. Each gradient leaves the device as soon as\n", cfg.ElemBytes, cfg.ElemBytes)
	fmt.Fprintf(w, "the backward reduces it: none is held (one at a time, transiently). Host memory is not budgeted.\n")
}
