package memory

import (
	"cmp"
	"slices"
)

// Snapshot is the allocator's layout at one moment: every segment held from
// Raw, in address order, with its blocks, and the statistics. While history
// is recording it also holds the recorded events and the creation sites of
// live blocks, all taken at the same moment, which is what timelines need
// (memory/report draws them); copying the history costs time and memory in
// proportion to its length, so code that only wants numbers should call
// Stats.
type Snapshot struct {
	Device   string
	Capacity int64
	Step     int64
	Stats    Stats
	Segments []SegmentInfo

	// History is a copy of History(), oldest first; nil when recording is
	// off.
	History []Event

	// RSS and PeakRSS are the process's resident set now and at its peak,
	// in bytes, filled in by a caller that can ask the operating system
	// (train does, from /proc/self/status); 0 means unknown. The summary
	// shows them beside the allocator's bytes.
	RSS, PeakRSS int64
	// Sites maps the address of each live block allocated while history
	// and a site function (SetSiteFunc) were on to its creation site.
	Sites map[Ptr]string
}

// SegmentInfo describes one segment and the blocks that tile it.
type SegmentInfo struct {
	Address Ptr
	Size    int64
	Pool    Pool
	Blocks  []BlockInfo // in address order; their sizes add up to Size
}

// BlockInfo describes a live or free block of a segment. Requested and
// Category are meaningful for live blocks only.
type BlockInfo struct {
	Offset    int64
	Size      int64
	Requested int64
	Category  Category
	Free      bool
}

// Allocated is the number of bytes of the segment's live blocks.
func (s SegmentInfo) Allocated() int64 {
	var n int64
	for _, b := range s.Blocks {
		if !b.Free {
			n += b.Size
		}
	}
	return n
}

// Snapshot returns the allocator's segments and statistics.
func (a *Allocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Snapshot{
		Device:   a.raw.Device(),
		Capacity: a.raw.Capacity(),
		Step:     a.step,
		Stats:    a.st,
		Segments: make([]SegmentInfo, 0, len(a.segments)),
	}
	for _, seg := range a.segments {
		info := SegmentInfo{Address: seg.base, Size: seg.size, Pool: seg.pool}
		for c := seg.first; c != nil; c = c.next {
			bi := BlockInfo{Offset: int64(c.ptr - seg.base), Size: c.size, Free: c.free()}
			if b := c.block; b != nil {
				bi.Requested, bi.Category = b.requested, b.Category()
				if b.site != "" {
					if s.Sites == nil {
						s.Sites = map[Ptr]string{}
					}
					s.Sites[b.ptr] = b.site
				}
			}
			info.Blocks = append(info.Blocks, bi)
		}
		s.Segments = append(s.Segments, info)
	}
	if a.hist != nil {
		s.History = a.hist.events()
	}
	slices.SortFunc(s.Segments, func(x, y SegmentInfo) int { return cmp.Compare(x.Address, y.Address) })
	return s
}
