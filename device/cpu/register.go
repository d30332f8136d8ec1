package cpu

import "github.com/memfit/memfit/device"

func init() {
	device.Register("cpu", func(o device.Options) (device.Device, error) {
		return New(Capacity(o.Capacity)), nil
	})
}
