package cpu

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/memfit/memfit/memory"
)

// align is the byte alignment of every segment: a cache line, and what
// AVX-512 loads like.
const align = 64

// hostRaw hands out 64-byte-aligned Go memory and refuses to exceed its
// capacity, so out-of-memory behaviour can be tested on any machine. It keeps
// each segment reachable in a map, which is what stops the garbage collector
// from reclaiming memory the caching allocator still manages.
type hostRaw struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	segments map[memory.Ptr][]byte
}

func newHostRaw(capacity int64) *hostRaw {
	return &hostRaw{capacity: capacity, segments: make(map[memory.Ptr][]byte)}
}

func (r *hostRaw) Alloc(size int64) (memory.Ptr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.capacity > 0 && r.used+size > r.capacity {
		return 0, fmt.Errorf("cpu: %d bytes requested, %d of %d in use", size, r.used, r.capacity)
	}
	buf := make([]byte, size+align)
	skip := int((align - uintptr(unsafe.Pointer(&buf[0]))%align) % align)
	buf = buf[skip : skip+int(size) : skip+int(size)]
	p := memory.Ptr(uintptr(unsafe.Pointer(&buf[0])))
	r.segments[p] = buf
	r.used += size
	return p, nil
}

func (r *hostRaw) Free(p memory.Ptr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	buf, ok := r.segments[p]
	if !ok {
		panic(fmt.Sprintf("cpu: free of unknown segment %#x", uintptr(p)))
	}
	r.used -= int64(len(buf))
	delete(r.segments, p)
}

func (r *hostRaw) Capacity() int64 { return r.capacity }
func (r *hostRaw) Device() string  { return "cpu" }

// bytes returns the host bytes of a block.
func (r *hostRaw) bytes(b *memory.Block) []byte {
	if b.Size() == 0 {
		return nil
	}
	r.mu.Lock()
	seg := r.segments[b.Segment()]
	r.mu.Unlock()
	off := b.Offset()
	return seg[off : off+b.Requested() : off+b.Size()]
}
