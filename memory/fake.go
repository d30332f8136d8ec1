package memory

import (
	"fmt"
	"sync"
)

// fakeBase is the first address a CountingRaw hands out; it keeps 0 free to
// mean "no address".
const fakeBase Ptr = 1 << 20

// CountingRaw is a Raw with no storage behind it: it hands out made-up,
// 512-byte-aligned addresses from a counter that never goes back, so live
// segments never overlap and are never adjacent, honours a capacity, and
// counts live bytes and calls. The meta device and tests use it. It is safe
// for concurrent use.
type CountingRaw struct {
	mu         sync.Mutex
	capacity   int64
	device     string
	next       Ptr
	live       map[Ptr]int64
	used, peak int64
	allocCalls int64
	freeCalls  int64
	failures   int64
}

var _ Raw = (*CountingRaw)(nil)

// NewCountingRaw returns a CountingRaw of capacity bytes (<= 0: unlimited)
// that calls itself device in messages ("fake" if empty).
func NewCountingRaw(capacity int64, device string) *CountingRaw {
	if device == "" {
		device = "fake"
	}
	return &CountingRaw{capacity: capacity, device: device, next: fakeBase, live: make(map[Ptr]int64)}
}

// Alloc hands out size bytes of address space, or an error when they would
// take the live bytes past the capacity.
func (r *CountingRaw) Alloc(size int64) (Ptr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allocCalls++
	if size <= 0 {
		r.failures++
		return 0, fmt.Errorf("%s: raw allocation of %d bytes", r.device, size)
	}
	if r.capacity > 0 && size > r.capacity-r.used {
		r.failures++
		return 0, fmt.Errorf("%s: out of memory: %s requested, %s of %s in use",
			r.device, FormatBytes(size), FormatBytes(r.used), FormatBytes(r.capacity))
	}
	p := r.next
	// Leave a 512-byte gap so that no two segments touch.
	r.next += Ptr((size+MinBlockSize-1)/MinBlockSize*MinBlockSize + MinBlockSize)
	r.live[p] = size
	r.used += size
	r.peak = max(r.peak, r.used)
	return p, nil
}

// Free releases a segment; it panics on an address it did not hand out or
// already took back.
func (r *CountingRaw) Free(p Ptr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	size, ok := r.live[p]
	if !ok {
		panic(fmt.Sprintf("%s: free of unknown segment %#x", r.device, uintptr(p)))
	}
	delete(r.live, p)
	r.used -= size
	r.freeCalls++
}

// Capacity returns the capacity in bytes; <= 0 means unlimited.
func (r *CountingRaw) Capacity() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.capacity
}

// SetCapacity changes the capacity, as another process taking or returning
// device memory would. Live segments stay.
func (r *CountingRaw) SetCapacity(n int64) {
	r.mu.Lock()
	r.capacity = n
	r.mu.Unlock()
}

// Device returns the name given to NewCountingRaw.
func (r *CountingRaw) Device() string { return r.device }

// Live returns the bytes of live segments.
func (r *CountingRaw) Live() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}

// Peak returns the highest value Live has had.
func (r *CountingRaw) Peak() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak
}

// Segments returns the number of live segments.
func (r *CountingRaw) Segments() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

// AllocCalls returns the number of Alloc calls, failed ones included.
func (r *CountingRaw) AllocCalls() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.allocCalls
}

// FreeCalls returns the number of Free calls.
func (r *CountingRaw) FreeCalls() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.freeCalls
}

// Failures returns the number of Alloc calls that returned an error.
func (r *CountingRaw) Failures() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures
}
