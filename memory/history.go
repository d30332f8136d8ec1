package memory

import "time"

// EventKind says what an Event records.
type EventKind uint8

// The kinds of events.
const (
	EventAlloc        EventKind = iota // a block was handed out
	EventFree                          // a block was freed
	EventSegmentAlloc                  // a segment was taken from Raw
	EventSegmentFree                   // a segment was returned to Raw
	EventOOM                           // an allocation failed
	EventRecategorize                  // a live block moved to another category
)

var eventNames = [...]string{"alloc", "free", "segment_alloc", "segment_free", "oom", "recategorize"}

// String returns "alloc", "free", "segment_alloc", "segment_free", "oom" or
// "recategorize".
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "event(?)"
}

// Event is one entry of the allocator's history. For blocks, Ptr, Size and
// Requested are the block's; for segments, Ptr and Size are the segment's
// and Requested and Category those of the request that caused a segment
// allocation (0 and Other when a segment is freed); for an OOM, Size is what
// the allocator tried to reserve; for a recategorization, Category is the
// block's new category and From its old one. Step is the value of the last
// SetStep. Site is where a block was allocated, as the function given to
// SetSiteFunc said at the time ("" without one); block events carry it.
type Event struct {
	Kind      EventKind
	Ptr       Ptr
	Size      int64
	Requested int64
	Category  Category
	From      Category
	Step      int64
	Time      time.Time
	Site      string
}

// history is a ring buffer of the last len(buf) events.
type history struct {
	buf  []Event
	next int
	full bool
}

func (h *history) add(e Event) {
	h.buf[h.next] = e
	h.next++
	if h.next == len(h.buf) {
		h.next = 0
		h.full = true
	}
}

// EnableHistory starts recording the last n events, dropping any recorded
// before; n <= 0 stops recording. Recording is off by default and costs
// nothing then.
func (a *Allocator) EnableHistory(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n <= 0 {
		a.hist = nil
		a.histOn.Store(false)
		return
	}
	a.hist = &history{buf: make([]Event, n)}
	a.histOn.Store(true)
}

// HistoryEnabled reports whether events are being recorded.
func (a *Allocator) HistoryEnabled() bool { return a.histOn.Load() }

// SetSiteFunc installs f to name the creation site of each block: while
// history is recording, Alloc calls f for every non-empty block, on the
// allocating goroutine and before taking the allocator's lock, and keeps
// the result with the block, in its alloc and free events and in
// Snapshot.Sites. While history is off f is never called. f must be safe
// for concurrent use and must not call the allocator. nil removes it.
//
// The tensor package installs a function that returns the file:line of the
// code that asked for a tensor (tensor.EnableAllocSites).
func (a *Allocator) SetSiteFunc(f func() string) {
	if f == nil {
		a.siteFn.Store(nil)
		return
	}
	a.siteFn.Store(&f)
}

// SetModule names the module that made block b (a layer's path, as
// "blocks.2.mlp.fc"): while history is recording, b's site becomes
// "module · file:line" in Snapshot.Sites, in the events recorded from now
// on and in its alloc event when that is among the last moduleLookback
// recorded. The first module named sticks: a block made inside a layer
// keeps that layer when an outer one hands it on. It does nothing while
// history is off. The tensor package calls it for what ops return inside a
// layer (tensor.Scope.Enter), which is how a memory report answers "which
// layer holds this?".
func (a *Allocator) SetModule(b *Block, module string) {
	if b == nil || module == "" || !a.histOn.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hist == nil || b.freed || b.module || b.size == 0 {
		return
	}
	b.module = true
	old := b.site
	b.site = module
	if old != "" {
		b.site += " · " + old
	}
	h := a.hist
	n := h.next
	if h.full {
		n = len(h.buf)
	}
	for k := 1; k <= min(n, moduleLookback); k++ {
		e := &h.buf[(h.next-k+len(h.buf))%len(h.buf)]
		if e.Ptr == b.ptr && (e.Kind == EventAlloc || e.Kind == EventRecategorize) {
			e.Site = b.site
			if e.Kind == EventAlloc {
				break
			}
		}
	}
}

// moduleLookback bounds how far back SetModule looks for a block's alloc
// event: an op names its result's module right after making it.
const moduleLookback = 256

// History returns the recorded events, oldest first (nil when recording is
// off).
func (a *Allocator) History() []Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hist == nil {
		return nil
	}
	return a.hist.events()
}

// events returns a copy of the recorded events, oldest first.
func (h *history) events() []Event {
	if !h.full {
		return append([]Event{}, h.buf[:h.next]...)
	}
	out := make([]Event, 0, len(h.buf))
	out = append(out, h.buf[h.next:]...)
	return append(out, h.buf[:h.next]...)
}

// SetStep stamps later events with a training step.
func (a *Allocator) SetStep(step int64) {
	a.mu.Lock()
	a.step = step
	a.mu.Unlock()
}

// Step returns the value of the last SetStep.
func (a *Allocator) Step() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.step
}
