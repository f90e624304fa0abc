package lower

import "math"

// ZeROEstimate is the ZeRO paper's memory and communication accounting
// (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", section 3 and 7) for Adam on N_d
// data-parallel devices, in the categories explain's training memory
// table uses, so the two can be laid side by side:
//
//   - Params: what explain calls parameters, the f32 weights the
//     optimizer updates (the master weights under mixed precision, which
//     the paper counts inside its K bytes of optimizer state);
//   - Half: the half-precision copy the forward and backward read (the
//     paper's 2Ψ "parameters"; explain counts it under "activations and
//     other"); 0 without mixed precision;
//   - Grads: the gradients, in the precision they are reduced in;
//   - Optimizer: the optimizer states proper (Adam's moments).
//
// Total is the paper's per-device model-state memory; activations are
// not counted. Every figure is bytes per device.
type ZeROEstimate struct {
	Stage     int
	Name      string
	Params    float64
	Half      float64
	Grads     float64
	Optimizer float64
	Total     float64
	// Fixed is the part of Total that does not shrink with more devices;
	// the rest is split N_d ways (FewestDevices solves for N_d).
	Fixed float64
	// Sent is the bytes each device sends per step with ring collectives:
	// SentPsi·(N−1)/N·Ψ elements of ElemBytes each.
	Sent     float64
	SentPsi  float64
	CommNote string
}

// EstimateConfig is what the accounting depends on.
type EstimateConfig struct {
	Psi     float64 // parameters
	Devices int     // data-parallel devices N_d
	// ElemBytes is the bytes of the values the forward reads and the
	// collectives move: 2 under mixed precision (bf16, f16), 4 for f32.
	ElemBytes float64
	// K is the paper's optimizer-state bytes per parameter: 12 for
	// mixed-precision Adam (f32 master weights 4, momentum 4, variance 4),
	// 8 for f32 Adam (the weights are the parameters themselves).
	K float64
}

// Mixed reports whether the training keeps a half-precision copy.
func (c EstimateConfig) Mixed() bool { return c.ElemBytes < 4 }

// EstimateZeRO returns the rows for plain DP and stages 1 to 3. The
// layout per stage is meshrun's (spec, Training: ZeRO), which is the
// paper's: stage 1 splits the optimizer states (the master weights
// among them), stage 2 also the gradients, stage 3 also the copy the
// forward reads.
func EstimateZeRO(c EstimateConfig) []ZeROEstimate {
	psi, n := c.Psi, float64(c.Devices)
	master, moments := 0.0, c.K
	if c.Mixed() {
		master, moments = 4, c.K-4
	}
	notes := []string{"all-reduce gradients", "reduce-scatter gradients, all-gather parameters",
		"reduce-scatter gradients, all-gather parameters",
		"all-gather parameters for the forward and again for the backward, reduce-scatter gradients"}
	names := []string{"DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"}
	var rows []ZeROEstimate
	for s := 0; s <= 3; s++ {
		r := ZeROEstimate{Stage: s, Name: names[s], CommNote: notes[s], SentPsi: 2}
		if s == 3 {
			r.SentPsi = 3
		}
		// part adds bytes per parameter b to a category, split N ways
		// from the given stage on.
		part := func(dst *float64, b float64, from int) {
			if s >= from {
				*dst = b * psi / n
			} else {
				*dst = b * psi
				r.Fixed += b * psi
			}
		}
		if c.Mixed() {
			part(&r.Params, master, 1)
			part(&r.Half, c.ElemBytes, 3)
		} else {
			part(&r.Params, c.ElemBytes, 3)
		}
		part(&r.Grads, c.ElemBytes, 2)
		part(&r.Optimizer, moments, 1)
		r.Total = r.Params + r.Half + r.Grads + r.Optimizer
		r.Sent = r.SentPsi * (n - 1) / n * psi * c.ElemBytes
		rows = append(rows, r)
	}
	return rows
}

// maxDevices bounds FewestDevices' answer: past it the count is not a
// machine anyone has (and would overflow an int).
const maxDevices = 1e15

// FewestDevices is the smallest N_d on which the stage's model states fit
// in memory bytes per device, or 0 when no number of devices up to
// maxDevices is enough (the unsplit part alone fills the memory, or
// nearly). c.Devices is not used. Activations are not counted.
func FewestDevices(c EstimateConfig, stage int, memory float64) int {
	r := EstimateZeRO(EstimateConfig{Psi: c.Psi, Devices: 1, ElemBytes: c.ElemBytes, K: c.K})[stage]
	return fewest(r, memory)
}

// fewest is the smallest N_d on which r's total (at N_d = 1) fits in
// memory, its Fixed part whole and the rest split N_d ways; 0: none.
func fewest(r ZeROEstimate, memory float64) int {
	split := r.Total - r.Fixed // everything at N_d = 1
	if split == 0 {
		if r.Fixed <= memory {
			return 1
		}
		return 0
	}
	if r.Fixed >= memory {
		return 0
	}
	q := math.Ceil(split / (memory - r.Fixed))
	if q > maxDevices {
		return 0
	}
	n := max(1, int(q))
	// Ceil of a rounded quotient can land one above the true answer.
	if n > 1 && r.Fixed+split/float64(n-1) <= memory {
		n--
	}
	return n
}

// OffloadEstimate is ZeRO-Offload (Ren et al., "ZeRO-Offload:
// Democratizing Billion-Scale Model Training", 2021) on ZeRO-2, laid out
// as meshrun's offload = optimizer does it (spec, Training: offload): the
// device keeps the copy of the weights the forward and backward read
// (Half: bf16/f16, or the f32 weights themselves without mixed precision)
// and no gradients between uses: each reduced gradient leaves the moment
// the backward reduces it, so one parameter's gradient is alive at a time
// (counted as transient, like activations, not here); the host keeps
// its part of the f32 master weights (Params), of the optimizer states
// and of the gradients it receives, and runs the update. Copied is the
// bytes each device copies each way per step: its part of the gradients
// to the host, its part of the updated weights back.
type OffloadEstimate struct {
	Device, Host ZeROEstimate
	Copied       float64
}

// EstimateOffload is the offload row for c.
func EstimateOffload(c EstimateConfig) OffloadEstimate {
	psi, n := c.Psi, float64(c.Devices)
	zero2 := EstimateZeRO(c)[2]
	e := c.ElemBytes
	moments := c.K
	if c.Mixed() {
		moments = c.K - 4 // K counts the master weights, which are Params here
	}
	dev := ZeROEstimate{Stage: 2, Name: "ZeRO-2 + offload", Half: e * psi, Fixed: e * psi,
		Sent: zero2.Sent, SentPsi: zero2.SentPsi, CommNote: zero2.CommNote}
	dev.Total = dev.Half + dev.Grads
	host := ZeROEstimate{Stage: 2, Name: dev.Name, Params: 4 * psi / n, Grads: e * psi / n, Optimizer: moments * psi / n}
	host.Total = host.Params + host.Grads + host.Optimizer
	return OffloadEstimate{Device: dev, Host: host, Copied: e * psi / n}
}

// FewestDevicesOffload is FewestDevices for the offload row's device
// memory: the copy the forward reads stays whole on every device.
func FewestDevicesOffload(c EstimateConfig, memory float64) int {
	return fewest(EstimateOffload(EstimateConfig{Psi: c.Psi, Devices: 1, ElemBytes: c.ElemBytes, K: c.K}).Device, memory)
}
