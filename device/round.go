package device

import (
	"math"

	"github.com/x448/float16"
)

// Round returns v rounded to dt's precision (to nearest, ties to even)
// as a float64: the value a tensor of dt stores for it. Like the kernels'
// conversions, F64 goes to the 16-bit types through float32 rounded to
// odd, so the result is rounded once. Integer and quantized dtypes, and
// F64, return v.
func Round(dt DType, v float64) float64 {
	switch dt {
	case F32:
		return float64(float32(v))
	case F16:
		return float64(float16.Fromfloat32(toOdd32(v)).Float32())
	case BF16:
		b := math.Float32bits(toOdd32(v))
		if b&0x7fffffff > 0x7f800000 { // NaN stays NaN
			return v
		}
		b += 0x7fff + (b>>16)&1
		return float64(math.Float32frombits(b &^ 0xffff))
	}
	return v
}

// toOdd32 is v rounded to float32 toward zero, its last bit set when
// that dropped anything (rounding to odd).
func toOdd32(v float64) float32 {
	f := float32(v)
	if math.IsInf(float64(f), 0) || math.IsNaN(v) || float64(f) == v {
		return f
	}
	if math.Abs(float64(f)) > math.Abs(v) {
		f = math.Float32frombits(math.Float32bits(f) - 1) // toward zero
	}
	return math.Float32frombits(math.Float32bits(f) | 1)
}
