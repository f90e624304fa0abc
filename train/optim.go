package train

import "github.com/meshrun/meshrun/ir"

// Defaults are each optimizer's hyperparameters before the program sets
// any: PyTorch's.
var Defaults = map[string]ir.Optimizer{
	"sgd":      {Kind: "sgd"},
	"momentum": {Kind: "momentum", Momentum: 0.9},
	"adam":     {Kind: "adam", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
	"adamw":    {Kind: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
}
