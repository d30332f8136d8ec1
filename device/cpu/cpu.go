package cpu

import (
	"runtime"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Device is the CPU device: memory from the OS behind the caching allocator and
// pure-Go kernels that use every core GOMAXPROCS allows.
type Device struct {
	raw     *hostRaw
	mem     *memory.Allocator
	threads int
}

var _ device.Device = (*Device)(nil)

// Option configures a CPU device.
type Option func(*Device)

// Capacity limits the device to n bytes (0: unlimited), so that programs and
// tests can meet out-of-memory on a machine with plenty.
func Capacity(n int64) Option { return func(d *Device) { d.raw.capacity = n } }

// HostMemory makes the device take its memory from h instead of the
// operating system's anonymous mappings: page-locked memory a GPU device
// allocates (device.HostMemory), so that a CPU device holding state
// offloaded from that GPU is copied to and from at full speed.
func HostMemory(h device.HostMemory) Option { return func(d *Device) { d.raw.segs.src = h } }

// Label names the device in its allocator's errors, reports and
// snapshots (default "cpu"): "host" for the memory training state is
// offloaded to, so that an out-of-memory error says which memory ran out.
func Label(name string) Option { return func(d *Device) { d.raw.label = name } }

// Threads sets how many goroutines one kernel may use (default GOMAXPROCS).
func Threads(n int) Option { return func(d *Device) { d.threads = max(n, 1) } }

// New returns a CPU device with its own allocator.
func New(opts ...Option) *Device {
	d := &Device{raw: newHostRaw(0), threads: runtime.GOMAXPROCS(0)}
	for _, o := range opts {
		o(d)
	}
	d.mem = memory.New(d.raw)
	return d
}

// Name is "cpu".
func (d *Device) Name() string { return "cpu" }

// Memory returns the device's caching allocator.
func (d *Device) Memory() *memory.Allocator { return d.mem }

// Alloc returns size bytes from the caching allocator, tagged with cat.
func (d *Device) Alloc(size int64, cat memory.Category) (device.Buffer, error) {
	b, err := d.mem.Alloc(size, cat)
	if err != nil {
		return device.Buffer{}, err
	}
	return device.Buffer{Block: b, Host: d.raw.bytes(b)}, nil
}

// Free returns a buffer to the cache.
func (d *Device) Free(b device.Buffer) { d.mem.Free(b.Block) }

// Write copies src into dst at byte offset off.
func (d *Device) Write(dst device.Buffer, off int64, src []byte) { copy(dst.Host[off:], src) }

// Read copies from src at byte offset off into dst.
func (d *Device) Read(dst []byte, src device.Buffer, off int64) { copy(dst, src.Host[off:]) }
