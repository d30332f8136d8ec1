package cpu

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// BenchmarkCausalFill masks the GPT reference's attention scores in place
// ([B·H, T, T] = [96, 256, 256] in bf16), as CausalScores does.
func BenchmarkCausalFill(b *testing.B) {
	d := New()
	shape := []int{96, 256, 256}
	n := 96 * 256 * 256
	buf, _ := d.Alloc(int64(2*n), memory.Other)
	v := device.View{Buf: buf, DType: device.BF16, Shape: shape, Strides: []int{256 * 256, 256, 1}}
	b.SetBytes(int64(2 * n))
	for range b.N {
		d.CausalFill(v, v, -1e30)
	}
}
