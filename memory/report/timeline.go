package report

import (
	"cmp"
	"slices"
	"time"

	"github.com/memfit/memfit/memory"
)

// Timeline is a snapshot's event history replayed: the bytes of live blocks
// by category and the reserved bytes before the first recorded event and
// after each one, the steps, and what was live at the peak.
//
// Bytes are block sizes (requests rounded up to 512 bytes), so that the
// categories add up to Allocated and compare with Reserved; the per-category
// figures of memory.Stats count requested bytes instead.
type Timeline struct {
	Device   string
	Capacity int64 // <= 0: unlimited

	// Points[0] is the state before Events[0]; Points[i] the state after
	// Events[i-1]. A timeline without history has the snapshot's state as
	// its only point.
	Points []Point
	Events []memory.Event

	// Steps lists the steps in the order they appear, one entry per run of
	// events stamped with the same step.
	Steps []StepSpan

	// Peak is the point of most allocated bytes (the first, on ties).
	Peak Peak

	// OOMs are the indices of the points that follow failed allocations.
	OOMs []int
}

// Point is the allocator's state at one moment of a Timeline.
type Point struct {
	ByCategory [memory.NumCategories]int64 // bytes of live blocks
	Reserved   int64
}

// Allocated is the bytes of live blocks, all categories together.
func (p Point) Allocated() int64 {
	var n int64
	for _, b := range p.ByCategory {
		n += b
	}
	return n
}

// StepSpan is one step of a Timeline: the points from First to Last
// (inclusive) follow events stamped with Step.
type StepSpan struct {
	Step        int64
	First, Last int
	Peak        int64 // most allocated bytes in the span
	End         int64 // allocated bytes after its last event
	Reserved    int64 // reserved bytes after its last event
}

// Peak says when allocated memory was highest and what held it.
type Peak struct {
	Index     int // into Points
	Step      int64
	Allocated int64
	Reserved  int64
	Point     Point
	// Sites groups the blocks live at the peak by creation site and
	// category, most bytes first. Site is "" for blocks whose site is
	// unknown: allocated before history was on or without a site function.
	Sites []SiteBytes
}

// SiteBytes is the live memory of one creation site and category.
type SiteBytes struct {
	Site     string
	Category memory.Category
	Blocks   int
	Bytes    int64
}

// liveBlock is what a replay knows of a live block.
type liveBlock struct {
	size int64
	cat  memory.Category
	site string
}

// NewTimeline replays the history held by s (see memory.Snapshot.History).
// The events may start long after the allocator did (the history is a ring
// buffer): the state before the first of them is worked out backwards from
// the snapshot's blocks.
func NewTimeline(s memory.Snapshot) *Timeline {
	tl := &Timeline{Device: s.Device, Capacity: s.Capacity, Events: s.History}

	// The live blocks and reserved bytes now ...
	live := map[memory.Ptr]liveBlock{}
	var reserved int64
	for _, seg := range s.Segments {
		reserved += seg.Size
		for _, b := range seg.Blocks {
			if !b.Free {
				p := seg.Address + memory.Ptr(b.Offset)
				live[p] = liveBlock{size: b.Size, cat: b.Category, site: s.Sites[p]}
			}
		}
	}
	// ... and before the first event.
	for i := len(s.History) - 1; i >= 0; i-- {
		e := s.History[i]
		switch e.Kind {
		case memory.EventAlloc:
			delete(live, e.Ptr)
		case memory.EventFree:
			live[e.Ptr] = liveBlock{size: e.Size, cat: e.Category, site: e.Site}
		case memory.EventRecategorize:
			if b, ok := live[e.Ptr]; ok {
				b.cat = e.From
				live[e.Ptr] = b
			}
		case memory.EventSegmentAlloc:
			reserved -= e.Size
		case memory.EventSegmentFree:
			reserved += e.Size
		}
	}
	start := Point{Reserved: reserved}
	for _, b := range live {
		start.ByCategory[b.cat] += b.size
	}

	tl.Points = make([]Point, 1, len(s.History)+1)
	tl.Points[0] = start
	cur := start
	for i, e := range s.History {
		apply(&cur, e)
		tl.Points = append(tl.Points, cur)
		if e.Kind == memory.EventOOM {
			tl.OOMs = append(tl.OOMs, i+1)
		}
	}

	// Steps and the peak.
	peak := 0
	for i, p := range tl.Points {
		a := p.Allocated()
		if a > tl.Points[peak].Allocated() {
			peak = i
		}
		step := tl.stepAt(i)
		if n := len(tl.Steps); n == 0 || tl.Steps[n-1].Step != step {
			tl.Steps = append(tl.Steps, StepSpan{Step: step, First: i, Last: i, Peak: a})
		}
		sp := &tl.Steps[len(tl.Steps)-1]
		sp.Last, sp.End, sp.Reserved = i, a, p.Reserved
		sp.Peak = max(sp.Peak, a)
	}

	// What was live at the peak: replay from the start again, to the peak.
	for _, e := range s.History[:peak] {
		switch e.Kind {
		case memory.EventAlloc:
			live[e.Ptr] = liveBlock{size: e.Size, cat: e.Category, site: e.Site}
		case memory.EventFree:
			delete(live, e.Ptr)
		case memory.EventRecategorize:
			if b, ok := live[e.Ptr]; ok {
				b.cat = e.Category
				live[e.Ptr] = b
			}
		}
	}
	type key struct {
		site string
		cat  memory.Category
	}
	groups := map[key]*SiteBytes{}
	for _, b := range live {
		k := key{b.site, b.cat}
		g := groups[k]
		if g == nil {
			g = &SiteBytes{Site: b.site, Category: b.cat}
			groups[k] = g
		}
		g.Blocks++
		g.Bytes += b.size
	}
	pp := tl.Points[peak]
	tl.Peak = Peak{Index: peak, Step: tl.stepAt(peak), Allocated: pp.Allocated(), Reserved: pp.Reserved, Point: pp}
	for _, g := range groups {
		tl.Peak.Sites = append(tl.Peak.Sites, *g)
	}
	slices.SortFunc(tl.Peak.Sites, func(x, y SiteBytes) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.Site, y.Site), cmp.Compare(x.Category, y.Category))
	})
	return tl
}

// apply moves p past e.
func apply(p *Point, e memory.Event) {
	switch e.Kind {
	case memory.EventAlloc:
		p.ByCategory[e.Category] += e.Size
	case memory.EventFree:
		p.ByCategory[e.Category] -= e.Size
	case memory.EventRecategorize:
		p.ByCategory[e.From] -= e.Size
		p.ByCategory[e.Category] += e.Size
	case memory.EventSegmentAlloc:
		p.Reserved += e.Size
	case memory.EventSegmentFree:
		p.Reserved -= e.Size
	}
}

// stepAt is the step of point i: that of the event that led to it, or of
// the first event for the starting point.
func (tl *Timeline) stepAt(i int) int64 {
	switch {
	case i > 0:
		return tl.Events[i-1].Step
	case len(tl.Events) > 0:
		return tl.Events[0].Step
	}
	return 0
}

// Duration is the time from the first recorded event to the last.
func (tl *Timeline) Duration() time.Duration {
	if len(tl.Events) < 2 {
		return 0
	}
	return tl.Events[len(tl.Events)-1].Time.Sub(tl.Events[0].Time)
}

// MaxReserved is the most reserved bytes at any point.
func (tl *Timeline) MaxReserved() int64 {
	var m int64
	for _, p := range tl.Points {
		m = max(m, p.Reserved)
	}
	return m
}

// sample picks at most n points to draw, splitting the points into n
// buckets of consecutive indices and keeping from each the point of most
// allocated bytes, so that no peak is lost; reserved is the most reserved
// bytes in the bucket.
type sample struct {
	index    int // the point drawn
	from, to int // the bucket: points [from, to)
	reserved int64
}

func (tl *Timeline) sample(n int) []sample {
	total := len(tl.Points)
	n = max(min(n, total), 1)
	out := make([]sample, 0, n)
	for b := range n {
		from, to := total*b/n, total*(b+1)/n
		if from == to {
			continue
		}
		s := sample{index: from, from: from, to: to}
		for i := from; i < to; i++ {
			p := tl.Points[i]
			if p.Allocated() > tl.Points[s.index].Allocated() {
				s.index = i
			}
			s.reserved = max(s.reserved, p.Reserved)
		}
		out = append(out, s)
	}
	return out
}
