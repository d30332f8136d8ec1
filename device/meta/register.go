package meta

import "github.com/memfit/memfit/device"

func init() {
	device.Register("meta", func(o device.Options) (device.Device, error) {
		return New(o.Capacity), nil
	})
}
