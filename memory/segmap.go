package memory

import (
	"fmt"
	"strings"
)

// segmentMapBar is the number of cells in each segment's bar.
const segmentMapBar = 40

// segmentMapMax is the number of segments SegmentMap draws before it sums
// up the rest in one line.
const segmentMapMax = 64

// categoryLetters are the cells of SegmentMap, one letter per category.
var categoryLetters = [NumCategories]byte{
	Other:          'X',
	Parameter:      'P',
	Gradient:       'G',
	OptimizerState: 'O',
	Activation:     'A',
	Temporary:      'T',
	Data:           'D',
	KVCache:        'K',
}

// SegmentMap renders the allocator's segments as a table as wide as
// Summary's: one line per segment, in address order, with its pool, size,
// bytes in live blocks and a bar in which each cell stands for 1/40 of the
// segment and shows the category holding most of it (P parameter,
// G gradient, O optimizer state, A activation, T temporary, D data,
// K KV cache, X other), '.' where it is free, and the letter in lower case where the
// cell is mostly free but holds some of that category. It shows where
// reserved memory that is not allocated sits, and why EmptyCache cannot
// return it.
func (a *Allocator) SegmentMap() string { return a.Snapshot().SegmentMap() }

// SegmentMap renders the snapshot's segments; see Allocator.SegmentMap.
func (s Snapshot) SegmentMap() string {
	var b strings.Builder
	rule := func(c byte) { b.WriteString("|" + strings.Repeat(string(c), summaryInner) + "|\n") }
	text := func(t string) { fmt.Fprintf(&b, "| %-*s |\n", summaryInner-2, t) }

	var reserved, used int64
	for _, seg := range s.Segments {
		reserved += seg.Size
		used += seg.Allocated()
	}
	title := fmt.Sprintf("segment map: %d segments, %s reserved, %s in live blocks",
		len(s.Segments), FormatBytes(reserved), FormatBytes(used))
	pad := max(summaryInner-len(title), 0)
	rule('=')
	b.WriteString("|" + strings.Repeat(" ", pad/2) + title + strings.Repeat(" ", pad-pad/2) + "|\n")
	rule('=')
	text("P parameter  G gradient  O optimizer_state  A activation  T temporary  D data")
	text("K kv_cache  X other  . free  (lower case: a cell mostly free that holds some)")
	rule('-')
	fmt.Fprintf(&b, "| %3s %-5s %10s %10s %-*s %4s |\n", "#", "pool", "size", "live", segmentMapBar+2, "cells of 1/40 segment", "used")
	rule('-')
	if len(s.Segments) == 0 {
		text("no segments")
	}
	for i, seg := range s.Segments {
		if i == segmentMapMax {
			var restSize, restUsed int64
			for _, r := range s.Segments[i:] {
				restSize += r.Size
				restUsed += r.Allocated()
			}
			text(fmt.Sprintf("... %d more segments: %s reserved, %s in live blocks",
				len(s.Segments)-i, FormatBytes(restSize), FormatBytes(restUsed)))
			break
		}
		u := seg.Allocated()
		pct := 0
		if seg.Size > 0 {
			pct = int(u * 100 / seg.Size)
		}
		fmt.Fprintf(&b, "| %3d %-5s %10s %10s [%s] %3d%% |\n",
			i+1, seg.Pool, FormatBytes(seg.Size), FormatBytes(u), segmentBar(seg, segmentMapBar), pct)
	}
	rule('=')
	return b.String()
}

// segmentBar draws seg in n cells (see SegmentMap).
func segmentBar(seg SegmentInfo, n int) string {
	cells := make([]byte, n)
	var byCat [NumCategories]int64
	bi := 0
	for i := range cells {
		// Cell i covers [lo, hi) of the segment.
		lo := seg.Size * int64(i) / int64(n)
		hi := seg.Size * int64(i+1) / int64(n)
		clear(byCat[:])
		var free, live int64
		for j := bi; j < len(seg.Blocks); j++ {
			blk := seg.Blocks[j]
			start, end := blk.Offset, blk.Offset+blk.Size
			if start >= hi {
				break
			}
			if end <= lo {
				bi = j + 1
				continue
			}
			overlap := min(end, hi) - max(start, lo)
			if blk.Free {
				free += overlap
			} else {
				byCat[blk.Category] += overlap
				live += overlap
			}
		}
		if live == 0 {
			cells[i] = '.'
			continue
		}
		top := Category(0)
		for c := range NumCategories {
			if byCat[c] > byCat[top] {
				top = c
			}
		}
		ch := categoryLetters[top]
		if free > live {
			ch += 'a' - 'A'
		}
		cells[i] = ch
	}
	return string(cells)
}
