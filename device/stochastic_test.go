package device_test

import (
	"math"
	"testing"

	"github.com/memfit/memfit/device"
)

// Stochastic rounding leaves bf16 values as they are, rounds every other
// value to one of its two bf16 neighbours, and is unbiased: the mean over
// many draws is the value.
func TestStochasticBF16(t *testing.T) {
	bf := func(b uint16) float64 { return float64(math.Float32frombits(uint32(b) << 16)) }
	for _, x := range []float32{1, -2.5, 0.1, -3.14159, 1e-30, 6.5e4, 1 + 1.0/512} {
		below := math.Float32bits(x) &^ 0xffff
		lo, hi := float64(math.Float32frombits(below)), float64(math.Float32frombits(below+0x10000))
		const n = 200000
		var sum float64
		for i := range uint64(n) {
			r := bf(device.StochasticBF16(x, device.StochasticBF16Bits(7, i)))
			if r != lo && r != hi {
				t.Fatalf("%v rounded to %v, not to its neighbours %v or %v", x, r, lo, hi)
			}
			sum += r
		}
		mean := sum / n
		// The mean of n draws is within 5 standard deviations of x.
		sd := math.Abs(hi-lo) / 2 / math.Sqrt(n)
		if math.Abs(mean-float64(x)) > 5*sd+1e-300 && lo != hi {
			t.Errorf("%v: mean of %d stochastic roundings %v (neighbours %v, %v): biased", x, n, mean, lo, hi)
		}
	}
	for _, b := range []uint16{0x3f80, 0xc0a0, 0x0001, 0x7f7f} {
		x := math.Float32frombits(uint32(b) << 16)
		for i := range uint64(100) {
			if got := device.StochasticBF16(x, device.StochasticBF16Bits(3, i)); got != b {
				t.Fatalf("bf16 value %#04x rounded to %#04x", b, got)
			}
		}
	}
	if got := device.StochasticBF16(float32(math.Inf(1)), 0xffff); got != 0x7f80 {
		t.Errorf("+inf rounded to %#04x", got)
	}
	if got := device.StochasticBF16(float32(math.NaN()), 0xffff); got&0x7fc0 != 0x7fc0 {
		t.Errorf("NaN rounded to %#04x, not a quiet NaN", got)
	}
}
