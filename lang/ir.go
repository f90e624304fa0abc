package lang

import (
	"github.com/meshrun/meshrun/ir"
	_ "github.com/meshrun/meshrun/ops" // registers every op's placement rule with sbp
)

// The IR lives in package ir. These aliases let lang's own code (the
// checker) name the IR's types unqualified; other packages use ir.

type (
	Graph      = ir.Graph
	Value      = ir.Value
	Attrs      = ir.Attrs
	Init       = ir.Init
	Output     = ir.Output
	Type       = ir.Type
	DType      = ir.DType
	Train      = ir.Train
	Optimizer  = ir.Optimizer
	Schedule   = ir.Schedule
	BatchInput = ir.BatchInput
	Carry      = ir.Carry
	Pos        = ir.Pos
	Error      = ir.Error
)

// The dtypes, as in package ir.
const (
	Invalid = ir.Invalid
	F32     = ir.F32
	F64     = ir.F64
	I32     = ir.I32
	I64     = ir.I64
	BF16    = ir.BF16
	F16     = ir.F16
)

// FormatPos renders file:line:col (ir.FormatPos).
func FormatPos(p Pos) string { return ir.FormatPos(p) }

// ShapeString renders [2, 3] (ir.ShapeString).
func ShapeString(s []int) string { return ir.ShapeString(s) }

// ParseDType looks up a dtype name (ir.ParseDType).
func ParseDType(s string) (DType, bool) { return ir.ParseDType(s) }
