package memory

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Ptr is a device address: a real address on the CPU, a made-up one on the
// meta device.
type Ptr uintptr

// Raw is the allocator underneath the cache: device memory that can run out.
type Raw interface {
	// Alloc returns size bytes; an error means there is no memory for them.
	Alloc(size int64) (Ptr, error)
	// Free returns memory obtained from Alloc.
	Free(p Ptr)
	// Capacity is the device's size in bytes; <= 0 means unlimited.
	Capacity() int64
	// Device names the device in messages: "cpu", "cuda:0", "meta".
	Device() string
}

// Sizes that govern rounding, pools and splitting (see the package doc).
const (
	MinBlockSize  = 512      // requests are rounded up to a multiple of this
	SmallSize     = 1 << 20  // largest rounded request served by the small pool
	SmallSegment  = 2 << 20  // segment size of the small pool
	LargeSegment  = 20 << 20 // segment size for requests of the large pool under MinLargeAlloc
	MinLargeAlloc = 10 << 20 // requests at least this big get their own segment
	RoundLarge    = 2 << 20  // rounding of own segments
)

// maxRequest is the largest request whose segment size does not overflow.
const maxRequest = math.MaxInt64 - RoundLarge

// RoundSize is the block size the allocator reserves for a request of n > 0
// bytes: n rounded up to a multiple of 512.
func RoundSize(n int64) int64 {
	if n <= MinBlockSize {
		return MinBlockSize
	}
	return (n + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// SegmentSize is the size of the segment the allocator asks Raw for when a
// request of n > 0 bytes finds no free block in its pool: 2 MiB for the small
// pool, 20 MiB for requests under 10 MiB, and the request rounded up to 2 MiB
// beyond. (On a device smaller than that, the segment is cut to RoundSize(n).)
func SegmentSize(n int64) int64 {
	r := RoundSize(n)
	switch {
	case r <= SmallSize:
		return SmallSegment
	case r < MinLargeAlloc:
		return LargeSegment
	default:
		return (r + RoundLarge - 1) / RoundLarge * RoundLarge
	}
}

// Pool is one of the allocator's two pools of segments.
type Pool uint8

// The pools.
const (
	SmallPool Pool = iota // rounded requests up to 1 MiB, 2 MiB segments
	LargePool             // everything bigger
)

// String returns "small" or "large".
func (p Pool) String() string {
	if p == SmallPool {
		return "small"
	}
	return "large"
}

func poolOf(rounded int64) Pool {
	if rounded <= SmallSize {
		return SmallPool
	}
	return LargePool
}

// shouldSplit reports whether rest bytes left over in a block are worth a
// block of their own.
func shouldSplit(p Pool, rest int64) bool {
	if p == SmallPool {
		return rest >= MinBlockSize
	}
	return rest > SmallSize
}

// Block is a piece of memory handed out by an Allocator. Its address, sizes
// and segment never change; only its category can (Recategorize). A Block
// must not be used after Free.
type Block struct {
	a         *Allocator
	c         *chunk // nil once freed; guarded by a.mu
	freed     bool   // guarded by a.mu
	ptr, seg  Ptr
	size      int64
	requested int64
	cat       atomic.Uint32
	site      string // creation site, when history and a site function were on
	module    bool   // site names its module (SetModule); guarded by a.mu
}

// Ptr is the address of the block's first byte (0 for an empty block).
func (b *Block) Ptr() Ptr { return b.ptr }

// Size is the number of bytes reserved for the block: the request rounded up
// to 512, or more when the rest of a free block was too small to split off.
func (b *Block) Size() int64 { return b.size }

// Requested is the number of bytes asked for.
func (b *Block) Requested() int64 { return b.requested }

// Category says what the block holds.
func (b *Block) Category() Category { return Category(b.cat.Load()) }

// Segment is the base address of the raw segment that holds the block.
func (b *Block) Segment() Ptr { return b.seg }

// Offset is the block's offset in its segment: Ptr() - Segment().
func (b *Block) Offset() int64 { return int64(b.ptr - b.seg) }

// String describes the block, as in "activation block of 1.00 KiB at 0x1000".
func (b *Block) String() string {
	return fmt.Sprintf("%s block of %s at %#x", b.Category(), FormatBytes(b.requested), uintptr(b.ptr))
}

// chunk is a contiguous piece of a segment, free or live. The chunks of a
// segment form a doubly linked list in address order; no two free chunks are
// neighbours.
type chunk struct {
	seg        *segment
	ptr        Ptr
	size       int64
	prev, next *chunk
	block      *Block // the live block, nil when free
}

func (c *chunk) free() bool { return c.block == nil }

// segment is memory obtained from Raw in one call.
type segment struct {
	base      Ptr
	size      int64
	pool      Pool
	first     *chunk
	live      int   // live blocks
	allocated int64 // bytes of live blocks
}

// inactiveSplit is the segment's contribution to Stats.InactiveSplit.
func (s *segment) inactiveSplit() int64 {
	if s.live == 0 {
		return 0
	}
	return s.size - s.allocated
}

// freeList holds the free chunks of a pool ordered by (size, address).
type freeList struct {
	chunks []*chunk
}

// search returns the index of the first chunk not ordered before (size, ptr).
func (l *freeList) search(size int64, ptr Ptr) int {
	lo, hi := 0, len(l.chunks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		c := l.chunks[m]
		if c.size < size || c.size == size && c.ptr < ptr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (l *freeList) insert(c *chunk) {
	i := l.search(c.size, c.ptr)
	l.chunks = append(l.chunks, nil)
	copy(l.chunks[i+1:], l.chunks[i:])
	l.chunks[i] = c
}

func (l *freeList) remove(c *chunk) {
	i := l.search(c.size, c.ptr)
	if i == len(l.chunks) || l.chunks[i] != c {
		panic(fmt.Sprintf("memory: internal error: free chunk %#x of %d bytes missing from its pool", uintptr(c.ptr), c.size))
	}
	copy(l.chunks[i:], l.chunks[i+1:])
	l.chunks[len(l.chunks)-1] = nil
	l.chunks = l.chunks[:len(l.chunks)-1]
}

// bestFit returns the smallest free chunk of at least size bytes, the lowest
// addressed among equals, or nil.
func (l *freeList) bestFit(size int64) *chunk {
	if i := l.search(size, 0); i < len(l.chunks) {
		return l.chunks[i]
	}
	return nil
}

// Allocator is a caching allocator over a Raw allocator. It is safe for
// concurrent use.
type Allocator struct {
	raw Raw

	mu       sync.Mutex
	pools    [2]freeList
	segments []*segment
	spare    []*chunk // recycled chunk structs
	st       Stats
	hist     *history
	step     int64
	marks    []*Watermark // open watermarks, updated on every change

	// histOn mirrors hist != nil and siteFn holds the SetSiteFunc hook, so
	// that Alloc can ask for a creation site before taking the lock, and
	// pays one atomic load when history is off.
	histOn atomic.Bool
	siteFn atomic.Pointer[func() string]

	// intr is the reason the allocator refuses every request, set by
	// Interrupt; nil while it serves them.
	intr atomic.Pointer[error]
}

// Interrupt makes every Alloc fail with an *InterruptError wrapping err,
// until Interrupt(nil): how a long computation that allocates as it goes
// (every tensor op makes its result) is stopped promptly from another
// goroutine, between one op and the next, when its context is cancelled.
// Kernels that run long between allocations check Interrupted.
func (a *Allocator) Interrupt(err error) {
	if err == nil {
		a.intr.Store(nil)
		return
	}
	a.intr.Store(&err)
}

// Interrupted returns the error Interrupt set, or nil.
func (a *Allocator) Interrupted() error {
	if e := a.intr.Load(); e != nil {
		return *e
	}
	return nil
}

// New returns an allocator that takes its segments from raw.
func New(raw Raw) *Allocator {
	return &Allocator{raw: raw}
}

// Device names the device of the underlying Raw allocator.
func (a *Allocator) Device() string { return a.raw.Device() }

// Capacity is the capacity of the underlying Raw allocator; <= 0 means
// unlimited.
func (a *Allocator) Capacity() int64 { return a.raw.Capacity() }

// Alloc returns a block of at least size bytes accounted to category cat.
// A size of 0 returns an empty block with no memory, counted nowhere. When
// the device is full, the error is an *OOMError; after Interrupt, an
// *InterruptError; a negative size or an unknown category is another
// error.
func (a *Allocator) Alloc(size int64, cat Category) (*Block, error) {
	if e := a.intr.Load(); e != nil {
		return nil, &InterruptError{Device: a.raw.Device(), Err: *e}
	}
	if size < 0 {
		return nil, fmt.Errorf("memory: negative allocation size %d on %s", size, a.raw.Device())
	}
	if cat >= NumCategories {
		return nil, fmt.Errorf("memory: allocation of %s on %s with unknown category %d", FormatBytes(size), a.raw.Device(), uint8(cat))
	}
	b := &Block{a: a, requested: size}
	b.cat.Store(uint32(cat))
	if size == 0 {
		return b, nil
	}
	if a.histOn.Load() {
		if f := a.siteFn.Load(); f != nil {
			b.site = (*f)()
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	capacity := a.raw.Capacity()
	if size > maxRequest {
		return nil, a.oom(size, size, cat, nil)
	}
	rounded := RoundSize(size)
	if capacity > 0 && rounded > capacity {
		return nil, a.oom(size, rounded, cat, nil)
	}
	pool := poolOf(rounded)
	list := &a.pools[pool]
	c := list.bestFit(rounded)
	if c != nil {
		list.remove(c)
		a.st.CacheHits++
	} else {
		var err error
		if c, err = a.grow(size, rounded, pool, cat, capacity); err != nil {
			return nil, err
		}
	}
	if rest := c.size - rounded; shouldSplit(pool, rest) {
		r := a.newChunk()
		r.seg, r.ptr, r.size = c.seg, c.ptr+Ptr(rounded), rest
		r.prev, r.next = c, c.next
		if c.next != nil {
			c.next.prev = r
		}
		c.next = r
		c.size = rounded
		list.insert(r)
	}

	c.block = b
	b.c, b.ptr, b.seg, b.size = c, c.ptr, c.seg.base, c.size
	seg := c.seg
	before := seg.inactiveSplit()
	seg.live++
	seg.allocated += c.size
	a.st.InactiveSplit.add(seg.inactiveSplit() - before)
	a.st.Allocated.add(c.size)
	a.st.Active.add(c.size)
	a.st.Requested.add(size)
	a.st.ByCategory[cat].add(size)
	if len(a.marks) > 0 {
		a.observe()
	}
	a.st.LiveBlocks.add(1)
	a.st.Allocs++
	if a.hist != nil {
		a.record(Event{Kind: EventAlloc, Ptr: b.ptr, Size: b.size, Requested: size, Category: cat, Site: b.site})
	}
	return b, nil
}

// grow takes a new segment for a request from Raw, releasing idle segments
// and retrying once if Raw refuses, and returns its single free chunk.
func (a *Allocator) grow(size, rounded int64, pool Pool, cat Category, capacity int64) (*chunk, error) {
	segSize := SegmentSize(rounded)
	if capacity > 0 && segSize > capacity {
		segSize = rounded
	}
	p, err := a.raw.Alloc(segSize)
	if err != nil {
		a.releaseIdle()
		a.st.Retries++
		p, err = a.raw.Alloc(segSize)
		if err != nil && segSize > rounded {
			// The device cannot give a whole segment but may still hold
			// the request itself: near the limit, a tight segment beats
			// an out-of-memory error.
			segSize = rounded
			p, err = a.raw.Alloc(segSize)
		}
		if err != nil {
			return nil, a.oom(size, segSize, cat, err)
		}
	}
	seg := &segment{base: p, size: segSize, pool: pool}
	c := a.newChunk()
	c.seg, c.ptr, c.size = seg, p, segSize
	seg.first = c
	a.segments = append(a.segments, seg)
	a.st.Reserved.add(segSize)
	a.st.Segments.add(1)
	a.st.RawAllocs++
	if a.hist != nil {
		a.record(Event{Kind: EventSegmentAlloc, Ptr: p, Size: segSize, Requested: size, Category: cat})
	}
	return c, nil
}

func (a *Allocator) newChunk() *chunk {
	if n := len(a.spare); n > 0 {
		c := a.spare[n-1]
		a.spare[n-1] = nil
		a.spare = a.spare[:n-1]
		return c
	}
	return new(chunk)
}

func (a *Allocator) recycle(c *chunk) {
	*c = chunk{}
	a.spare = append(a.spare, c)
}

// Free returns a block to the cache. Free(nil) does nothing; freeing a block
// twice, or a block of another allocator, panics.
func (a *Allocator) Free(b *Block) {
	if b == nil {
		return
	}
	if b.a != a {
		panic(fmt.Sprintf("memory: Free on %s of a block that this allocator did not hand out (%s)", a.raw.Device(), b))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.freed {
		panic(fmt.Sprintf("memory: double free on %s of %s", a.raw.Device(), b))
	}
	b.freed = true
	c := b.c
	if c == nil { // an empty block
		return
	}
	b.c = nil
	cat := b.Category()
	seg := c.seg
	before := seg.inactiveSplit()
	seg.live--
	seg.allocated -= c.size
	a.st.InactiveSplit.add(seg.inactiveSplit() - before)
	a.st.Allocated.add(-c.size)
	a.st.Active.add(-c.size)
	a.st.Requested.add(-b.requested)
	a.st.ByCategory[cat].add(-b.requested)
	a.st.LiveBlocks.add(-1)
	a.st.Frees++
	if a.hist != nil {
		a.record(Event{Kind: EventFree, Ptr: b.ptr, Size: b.size, Requested: b.requested, Category: cat, Site: b.site})
	}

	c.block = nil
	list := &a.pools[seg.pool]
	if p := c.prev; p != nil && p.free() {
		list.remove(p)
		p.size += c.size
		p.next = c.next
		if c.next != nil {
			c.next.prev = p
		}
		a.recycle(c)
		c = p
	}
	if n := c.next; n != nil && n.free() {
		list.remove(n)
		c.size += n.size
		c.next = n.next
		if n.next != nil {
			n.next.prev = c
		}
		a.recycle(n)
	}
	list.insert(c)
}

// Recategorize moves the requested bytes of a live block to category c.
// It panics on a freed block, a block of another allocator or an unknown
// category.
func (a *Allocator) Recategorize(b *Block, c Category) {
	if b == nil {
		return
	}
	if c >= NumCategories {
		panic(fmt.Sprintf("memory: Recategorize to unknown category %d", uint8(c)))
	}
	if b.a != a {
		panic(fmt.Sprintf("memory: Recategorize on %s of a block that this allocator did not hand out (%s)", a.raw.Device(), b))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.freed {
		panic(fmt.Sprintf("memory: Recategorize on %s of freed %s", a.raw.Device(), b))
	}
	old := b.Category()
	if old == c {
		return
	}
	if b.c != nil {
		a.st.ByCategory[old].add(-b.requested)
		a.st.ByCategory[c].add(b.requested)
		if len(a.marks) > 0 {
			a.observe()
		}
		if a.hist != nil {
			a.record(Event{Kind: EventRecategorize, Ptr: b.ptr, Size: b.size, Requested: b.requested, Category: c, From: old, Site: b.site})
		}
	}
	b.cat.Store(uint32(c))
}

// EmptyCache returns every idle segment (one without live blocks) to Raw, so
// that Reserved comes down to the segments that still hold live blocks.
func (a *Allocator) EmptyCache() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseIdle()
}

func (a *Allocator) releaseIdle() {
	kept := a.segments[:0]
	for _, s := range a.segments {
		if s.live != 0 {
			kept = append(kept, s)
			continue
		}
		a.pools[s.pool].remove(s.first)
		a.recycle(s.first)
		a.raw.Free(s.base)
		a.st.Reserved.add(-s.size)
		a.st.Segments.add(-1)
		a.st.RawFrees++
		if a.hist != nil {
			a.record(Event{Kind: EventSegmentFree, Ptr: s.base, Size: s.size, Category: Other})
		}
	}
	clear(a.segments[len(kept):])
	a.segments = kept
}

// oom counts a failed allocation and describes it. size is what the
// allocator tried to reserve for it; cause is Raw's error, if Raw was asked.
func (a *Allocator) oom(requested, size int64, cat Category, cause error) *OOMError {
	a.st.OOMs++
	e := &OOMError{
		Requested: requested,
		Size:      size,
		Category:  cat,
		Capacity:  a.raw.Capacity(),
		Allocated: a.st.Allocated.Current,
		Reserved:  a.st.Reserved.Current,
		Free:      -1,
		Device:    a.raw.Device(),
		Err:       cause,
	}
	if e.Capacity > 0 {
		e.Free = max(e.Capacity-e.Reserved, 0)
	}
	for i := range e.ByCategory {
		e.ByCategory[i] = a.st.ByCategory[i].Current
	}
	if a.hist != nil {
		a.record(Event{Kind: EventOOM, Size: size, Requested: requested, Category: cat})
	}
	return e
}

// ResetPeak sets every peak, per category included, to its current value.
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st.resetPeaks()
}

// Stats returns a consistent copy of the statistics.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// Allocated is the current number of rounded bytes in live blocks, as
// torch.cuda.memory_allocated.
func (a *Allocator) Allocated() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Allocated.Current
}

// Reserved is the current number of bytes held from Raw, as
// torch.cuda.memory_reserved.
func (a *Allocator) Reserved() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Reserved.Current
}

// MaxAllocated is the peak of Allocated, as torch.cuda.max_memory_allocated.
func (a *Allocator) MaxAllocated() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Allocated.Peak
}

// MaxReserved is the peak of Reserved, as torch.cuda.max_memory_reserved.
func (a *Allocator) MaxReserved() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.Reserved.Peak
}

// record stamps e with the step and the time and appends it to the history;
// a.mu is held and a.hist is set.
func (a *Allocator) record(e Event) {
	e.Step, e.Time = a.step, time.Now()
	a.hist.add(e)
}

// checkInvariants walks every segment and compares what it finds with the
// free lists and the statistics. Tests call it.
func (a *Allocator) checkInvariants() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var allocated, requested, reserved, inactive, live int64
	var byCat [NumCategories]int64
	free := map[*chunk]bool{}
	for _, s := range a.segments {
		reserved += s.size
		if s.first == nil || s.first.prev != nil || s.first.ptr != s.base {
			return fmt.Errorf("segment %#x: bad first chunk", uintptr(s.base))
		}
		var sum, segAlloc int64
		var segLive int
		end := s.base
		for c := s.first; c != nil; c = c.next {
			if c.seg != s || c.ptr != end || c.size <= 0 {
				return fmt.Errorf("segment %#x: chunk %#x+%d does not follow %#x", uintptr(s.base), uintptr(c.ptr), c.size, uintptr(end))
			}
			if c.next != nil && c.next.prev != c {
				return fmt.Errorf("segment %#x: broken links at %#x", uintptr(s.base), uintptr(c.ptr))
			}
			end += Ptr(c.size)
			sum += c.size
			if c.free() {
				if c.next != nil && c.next.free() {
					return fmt.Errorf("segment %#x: free neighbours at %#x not merged", uintptr(s.base), uintptr(c.ptr))
				}
				free[c] = true
				continue
			}
			b := c.block
			if b.c != c || b.ptr != c.ptr || b.size != c.size || b.seg != s.base || b.freed {
				return fmt.Errorf("segment %#x: block at %#x disagrees with its chunk", uintptr(s.base), uintptr(c.ptr))
			}
			segLive++
			segAlloc += c.size
			requested += b.requested
			byCat[b.Category()] += b.requested
		}
		if sum != s.size {
			return fmt.Errorf("segment %#x: chunks cover %d of %d bytes", uintptr(s.base), sum, s.size)
		}
		if segLive != s.live || segAlloc != s.allocated {
			return fmt.Errorf("segment %#x: counts %d blocks / %d bytes, holds %d / %d", uintptr(s.base), s.live, s.allocated, segLive, segAlloc)
		}
		allocated += segAlloc
		inactive += s.inactiveSplit()
		live += int64(segLive)
	}
	n := 0
	for p := range a.pools {
		l := &a.pools[p]
		for i, c := range l.chunks {
			if !free[c] || c.seg.pool != Pool(p) {
				return fmt.Errorf("pool %s: chunk %#x is not a free chunk of this pool", Pool(p), uintptr(c.ptr))
			}
			if i > 0 {
				q := l.chunks[i-1]
				if q.size > c.size || q.size == c.size && q.ptr >= c.ptr {
					return fmt.Errorf("pool %s: free list out of order at %d", Pool(p), i)
				}
			}
		}
		n += len(l.chunks)
	}
	if n != len(free) {
		return fmt.Errorf("free lists hold %d chunks, segments %d", n, len(free))
	}
	st := a.st
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"allocated", st.Allocated.Current, allocated},
		{"active", st.Active.Current, allocated},
		{"requested", st.Requested.Current, requested},
		{"reserved", st.Reserved.Current, reserved},
		{"inactive split", st.InactiveSplit.Current, inactive},
		{"live blocks", st.LiveBlocks.Current, live},
		{"segments", st.Segments.Current, int64(len(a.segments))},
	} {
		if c.got != c.want {
			return fmt.Errorf("stat %s is %d, memory says %d", c.name, c.got, c.want)
		}
	}
	for i := range byCat {
		if st.ByCategory[i].Current != byCat[i] {
			return fmt.Errorf("category %s is %d, blocks say %d", Category(i), st.ByCategory[i].Current, byCat[i])
		}
	}
	return nil
}
