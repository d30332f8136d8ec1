package device_test

import (
	"fmt"

	"github.com/memfit/memfit/device"
)

// Quantizing a block of 64 values to NF4 on the host: each value becomes
// the nearest of sixteen levels times the block's absmax, and the absmax
// itself is stored in 8 bits (double quantization).
func ExampleQuantizeNF4() {
	x := make([]float32, 64)
	for i := range x {
		x[i] = float32(i-32) / 16
	}
	p, err := device.QuantizeNF4(x)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("codes %#02x %#02x, absmax %.4f\n", p.Codes[0], p.Codes[31], p.Absmax(0))
	fmt.Printf("x[1] %.4f → %.4f, x[40] %.4f → %.4f\n", x[1], p.Value(1), x[40], p.Value(40))
	fmt.Println(device.NF4Bytes(len(x)), "bytes;", device.Int8Bytes(len(x)), "as Int8")
	// Output:
	// codes 0x00 0xff, absmax 2.0000
	// x[1] -1.9375 → -2.0000, x[40] 0.5000 → 0.4922
	// 1129 bytes; 68 as Int8
}
