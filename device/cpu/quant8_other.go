//go:build purego || !amd64

package cpu

import "github.com/memfit/memfit/device"

// adam8Vector has no vector path here: device.Adam8bitBlock steps blocks.
func adam8Vector(p, g []float32, m, v []uint8, ms, vs *float32, c *device.Adam8bitConsts, work []float32) bool {
	return false
}
