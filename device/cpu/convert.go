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
