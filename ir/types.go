package ir

import (
	"fmt"
	"strings"

	"github.com/meshrun/meshrun/internal/size"
)

// DType is an element type.
type DType uint8

const (
	Invalid DType = iota
	F32
	F64
	I32
	I64
	BF16 // 2-byte storage; kernels compute in f32 and round once
	F16  // as BF16, IEEE half
)

var dtypeNames = map[string]DType{"f32": F32, "f64": F64, "i32": I32, "i64": I64, "bf16": BF16, "f16": F16}

// ParseDType looks up a dtype name.
func ParseDType(s string) (DType, bool) {
	d, ok := dtypeNames[s]
	return d, ok
}

func (d DType) String() string {
	for k, v := range dtypeNames {
		if v == d {
			return k
		}
	}
	return "invalid"
}

// Size is the bytes per element.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// IsFloat reports f32/f64 (and the reserved half types).
func (d DType) IsFloat() bool { return d == F32 || d == F64 || d == BF16 || d == F16 }

// IsInt reports i32/i64.
func (d DType) IsInt() bool { return d == I32 || d == I64 }

// Type is a tensor type: dtype and global shape.
type Type struct {
	DType DType
	Shape []int
}

// Rank is the number of dims.
func (t Type) Rank() int { return len(t.Shape) }

// Numel is the number of elements, or -1 for a shape too large to count
// (see package size). The Builder admits no value of such a type, so in a
// graph Numel is always the true count.
func (t Type) Numel() int {
	n, ok := size.Elements(t.Shape)
	if !ok {
		return -1
	}
	return n
}

// Sized reports whether the shape has no negative dim and at most
// size.MaxElements elements.
func (t Type) Sized() bool {
	_, ok := size.Elements(t.Shape)
	return ok
}

// Bytes is the size of the whole tensor (-1 when Numel is).
func (t Type) Bytes() int {
	n := t.Numel()
	if n < 0 {
		return -1
	}
	return n * t.DType.Size()
}

func (t Type) String() string { return t.DType.String() + ShapeString(t.Shape) }

// ShapeString renders [2, 3].
func ShapeString(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
