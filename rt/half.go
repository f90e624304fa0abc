package rt

import (
	"math"

	"github.com/meshrun/meshrun/ir"
)

// Half-precision storage. bf16 and f16 tensors hold []uint16 bit patterns;
// every kernel computes them by widening to f32, running the f32 kernel and
// rounding the result once (round to nearest, ties to even), as mixed-
// precision hardware accumulates in f32. Memory figures count 2 bytes.

// F32ToBF16 rounds to the nearest bfloat16 (ties to even); NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens a bfloat16.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToF16 rounds to the nearest IEEE binary16 (ties to even), with
// subnormals, overflow to ±inf and NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp == 0 && man == 0:
		return sign
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00 // overflow
	}
	if e <= 0 {
		// subnormal half: shift the mantissa (with its implicit 1) right
		if e < -10 {
			return sign // underflow to zero
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & ((1 << shift) - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to inf: still correct
	}
	return sign | uint16(r)
}

// F16ToF32 widens an IEEE binary16.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

func isHalf(dt ir.DType) bool { return dt == ir.BF16 || dt == ir.F16 }

// widen returns an f32 copy of a half tensor (other tensors unchanged).
func widen(t *Tensor) *Tensor {
	if !isHalf(t.DType) {
		return t
	}
	out := NewTensor(ir.F32, t.Shape)
	d := out.Data.([]float32)
	conv := BF16ToF32
	if t.DType == ir.F16 {
		conv = F16ToF32
	}
	for i, h := range t.Data.([]uint16) {
		d[i] = conv(h)
	}
	return out
}

// narrow rounds an f32 tensor to a half dtype.
func narrow(t *Tensor, dt ir.DType) *Tensor {
	out := NewTensor(dt, t.Shape)
	d := out.Data.([]uint16)
	conv := F32ToBF16
	if dt == ir.F16 {
		conv = F32ToF16
	}
	for i, f := range widen(t).Data.([]float32) {
		d[i] = conv(f)
	}
	return out
}

// NpyReady returns a tensor .npy can hold: half tensors are widened to f32
// (NumPy has no bfloat16; f16 is widened too, so every output of a
// mixed-precision program reads the same way).
func NpyReady(t *Tensor) *Tensor { return widen(t) }
