package cpu

import (
	"sync"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/internal/procmem"
)

// Opened by name (device.Open("cpu", …)), as the train command does, a CPU
// device without a capacity gets DefaultCapacity; New without Capacity
// stays unlimited.
func init() {
	device.InHostMemory("cpu")
	// Its attention kernels hold a block's [Br, T] scores per slot
	// (device.AttentionWorkspace), where the meta device, standing for
	// a device with tiled kernels too, would take none.
	device.Lacking("cpu", device.CapTiledAttention)
	device.Register("cpu", func(o device.Options) (device.Device, error) {
		c := o.Capacity
		if c == 0 {
			c = DefaultCapacity()
		}
		return New(Capacity(c)), nil
	})
}

var defaultCapacity = sync.OnceValue(func() int64 {
	n, ok := procmem.Limit()
	if !ok {
		return 0
	}
	if a, ok := procmem.Available(); ok && a < n {
		n = a
	}
	margin := min(max(n/8, 256<<20), n/2)
	return n - margin
})

// DefaultCapacity is the capacity of a CPU device opened by name without
// one: the memory this process may use (physical memory, or its cgroup's
// limit when lower), or what was available when it was first asked for
// when other processes held some of it, less a margin of an eighth (at
// least 256 MiB, at most half) for the Go runtime, the data loader and the
// rest of the process. A request beyond it fails with memfit's own
// out-of-memory error, which names the categories and what to turn on,
// rather than the Go runtime's fatal error or the kernel's out-of-memory
// killer. It is computed once per process; 0 (unlimited) where the system
// does not say.
func DefaultCapacity() int64 { return defaultCapacity() }
