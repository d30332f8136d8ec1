package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// hostRaw hands out segments of host memory and refuses to exceed its
// capacity, so out-of-memory behaviour can be tested on any machine.
//
// Where the OS offers anonymous mappings (raw_mmap.go) every segment is one,
// outside the Go heap: a segment the caching allocator frees (EmptyCache,
// the retry before an OOM) goes back to the OS at once, and the process's
// resident memory follows the allocator's reserved bytes instead of waiting
// for the garbage collector (issue 19). Elsewhere segments are Go memory
// (raw_heap.go), kept reachable by the segment map.
type hostRaw struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	segs     *segTable
	label    string // the allocator's device name ("" : "cpu")
}

// segTable maps each segment's address to its bytes. It is apart from
// hostRaw so that the cleanup registered in newHostRaw can reach it
// without keeping the hostRaw alive. src, when set, is where segments
// come from instead of the OS's anonymous mappings (HostMemory).
type segTable struct {
	m   map[memory.Ptr][]byte
	src device.HostMemory
}

// alloc and free take a segment from, and give it back to, the table's
// source.
func (t *segTable) alloc(n int) ([]byte, error) {
	if t.src != nil {
		return t.src.AllocHost(n)
	}
	return sysAlloc(n)
}

func (t *segTable) free(b []byte) {
	if t.src != nil {
		// A source that fails to free has lost track of memory it
		// gave; nothing here can recover it, and the bytes are no
		// longer used.
		_ = t.src.FreeHost(b)
		return
	}
	sysFree(b)
}

func newHostRaw(capacity int64) *hostRaw {
	r := &hostRaw{capacity: capacity, segs: &segTable{m: make(map[memory.Ptr][]byte)}}
	// A device dropped while its allocator still holds segments (tests
	// make thousands) would otherwise keep their mappings for the life of
	// the process. This is a backstop for the whole device, as the Go heap
	// was for make([]byte) segments: tensors never rely on it, since their
	// blocks return to the cache explicitly, and every Block reaches this
	// hostRaw through its allocator, so no live block's memory is unmapped.
	runtime.AddCleanup(r, func(t *segTable) {
		for p, b := range t.m {
			t.free(b)
			delete(t.m, p)
		}
	}, r.segs)
	return r
}

func (r *hostRaw) Alloc(size int64) (memory.Ptr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.capacity > 0 && r.used+size > r.capacity {
		return 0, fmt.Errorf("cpu: %d bytes requested, %d of %d in use", size, r.used, r.capacity)
	}
	if size <= 0 || int64(int(size)) != size {
		return 0, fmt.Errorf("cpu: cannot reserve a segment of %d bytes", size)
	}
	buf, err := r.segs.alloc(int(size))
	if err != nil {
		return 0, fmt.Errorf("cpu: reserving a segment of %s: %w", memory.FormatBytes(size), err)
	}
	p := memory.Ptr(uintptr(unsafe.Pointer(&buf[0])))
	r.segs.m[p] = buf
	r.used += size
	return p, nil
}

func (r *hostRaw) Free(p memory.Ptr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	buf, ok := r.segs.m[p]
	if !ok {
		panic(fmt.Sprintf("cpu: free of unknown segment %#x", uintptr(p)))
	}
	r.used -= int64(len(buf))
	delete(r.segs.m, p)
	r.segs.free(buf)
}

func (r *hostRaw) Capacity() int64 { return r.capacity }
func (r *hostRaw) Device() string {
	if r.label != "" {
		return r.label
	}
	return "cpu"
}

// bytes returns the host bytes of a block.
func (r *hostRaw) bytes(b *memory.Block) []byte {
	if b.Size() == 0 {
		return nil
	}
	r.mu.Lock()
	seg := r.segs.m[b.Segment()]
	r.mu.Unlock()
	off := b.Offset()
	return seg[off : off+b.Requested() : off+b.Size()]
}
