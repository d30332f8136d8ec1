package cuda

import "github.com/memfit/memfit/device"

// Importing this package offers "cuda" to device.Open. In a build without
// the cuda tag the opener fails with the message saying how to rebuild, so
// a command that imports it explains itself instead of calling the device
// unknown.
func init() {
	device.Register("cuda", func(o device.Options) (device.Device, error) {
		d, err := New(o.Ordinal, MemLimit(o.Capacity))
		if err != nil {
			return nil, err
		}
		return d, nil
	})
	// Products with a quantized weight dequantize it a tile at a time into
	// a temporary (k_dequant) for cuBLAS: the composed QuantGemm, whose
	// tiles a plan for this device must count.
	device.Lacking("cuda", device.CapQuantGemm)
}
