package lower

// ZeROEstimate is the ZeRO paper's memory and communication accounting
// for mixed-precision Adam: Ψ parameters, N_d data-parallel devices, K
// bytes of optimizer state per parameter (12 for fp32 master weights,
// momentum and variance). Params and gradients are 2 bytes each (fp16).
type ZeROEstimate struct {
	Stage     int
	Name      string
	Params    float64 // bytes per device
	Grads     float64
	Optimizer float64
	Total     float64
	Comm      float64 // bytes each device moves per step, in units of Ψ·2 bytes as the paper counts
	CommNote  string
}

// EstimateZeRO returns the rows for plain DP and stages 1 to 3.
func EstimateZeRO(psi float64, nd int, k float64) []ZeROEstimate {
	n := float64(nd)
	rows := []ZeROEstimate{
		{Stage: 0, Name: "DP", Params: 2 * psi, Grads: 2 * psi, Optimizer: k * psi, Comm: 2, CommNote: "all-reduce gradients"},
		{Stage: 1, Name: "ZeRO-1", Params: 2 * psi, Grads: 2 * psi, Optimizer: k * psi / n, Comm: 2, CommNote: "reduce-scatter gradients, all-gather parameters"},
		{Stage: 2, Name: "ZeRO-2", Params: 2 * psi, Grads: 2 * psi / n, Optimizer: k * psi / n, Comm: 2, CommNote: "reduce-scatter gradients, all-gather parameters"},
		{Stage: 3, Name: "ZeRO-3", Params: 2 * psi / n, Grads: 2 * psi / n, Optimizer: k * psi / n, Comm: 3, CommNote: "all-gather parameters (forward and backward), reduce-scatter gradients"},
	}
	for i := range rows {
		rows[i].Total = rows[i].Params + rows[i].Grads + rows[i].Optimizer
	}
	return rows
}
