package cpu

import (
	"math"

	"github.com/x448/float16"
)

// BF16FromF32 rounds f to bfloat16 with round-to-nearest-even; NaN stays NaN.
func BF16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // keep the sign, force a quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F32FromBF16 widens a bfloat16 exactly.
func F32FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16FromF32 rounds f to IEEE half precision with round-to-nearest-even.
func F16FromF32(f float32) uint16 { return uint16(float16.Fromfloat32(f)) }

// F32FromF16 widens an IEEE half exactly.
func F32FromF16(h uint16) float32 { return float16.Float16(h).Float32() }

// BF16FromF64 rounds f to bfloat16 once, to nearest even, from the float64
// value: float32(f) first would round twice (a float64 just above a bf16
// halfway point can land on it in float32 and then go to even, the wrong
// way).
func BF16FromF64(f float64) uint16 {
	b := math.Float64bits(f)
	mag := b &^ (1 << 63)
	// A result that is a normal bfloat16 (or overflows to infinity) is
	// f's bits rounded at once: the exponent rebiased from 1023 to 127
	// (1023-127 = 896), the 52-bit mantissa cut to 7 bits to nearest even,
	// a carry moving into the exponent. The rest (zeros, subnormal
	// results, infinities, NaNs) goes through float32 rounded to odd. The
	// two agree bit for bit (TestBF16FromF64); this is the path a model's
	// initialisation takes for every weight.
	if e := mag >> 52; e >= 897 && e <= 1150 {
		r := mag - 896<<52
		r += 1<<44 - 1 + (r>>45)&1
		return uint16(b>>48)&0x8000 | uint16(r>>45)
	}
	return BF16FromF32(f32Odd(f))
}

// F16FromF64 rounds f to IEEE half precision once, to nearest even.
func F16FromF64(f float64) uint16 { return F16FromF32(f32Odd(f)) }

// f32Odd rounds f to float32 with round-to-odd: truncated toward zero,
// with the last bit set when anything was cut off. A value rounded to odd
// with at least two more bits than the final format rounds to that format
// exactly as f itself would (float32 keeps 24 bits; bf16 8, f16 11), so
// the 16-bit conversions above round once.
func f32Odd(f float64) float32 {
	r := float32(f)
	if float64(r) == f || f != f {
		return r // exact, or NaN
	}
	b := math.Float32bits(r)
	if math.Abs(float64(r)) > math.Abs(f) {
		b-- // rounded away from zero: step back toward it (sign-magnitude)
	}
	return math.Float32frombits(b | 1)
}
