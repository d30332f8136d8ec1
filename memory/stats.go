package memory

// Stat follows one quantity: its current value, its peak since creation or
// the last ResetPeak, and running totals of what was added (Allocated) and
// taken away (Freed), so Current == Allocated - Freed.
type Stat struct {
	Current, Peak, Allocated, Freed int64
}

func (s *Stat) add(n int64) {
	if n >= 0 {
		s.Allocated += n
	} else {
		s.Freed -= n
	}
	s.Current += n
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
}

func (s *Stat) resetPeak() { s.Peak = s.Current }

// Stats is a consistent copy of an allocator's statistics. Byte stats:
//
//   - Allocated: rounded bytes of live blocks (Block.Size);
//   - Requested: bytes asked for by live blocks (Block.Requested), exact;
//   - Reserved: bytes of segments held from Raw;
//   - Active: bytes of live blocks, as PyTorch's "active". PyTorch counts a
//     freed block as active while a stream may still use it; memfit frees
//     at once, so Active equals Allocated;
//   - InactiveSplit: free bytes inside segments that also hold live blocks;
//     EmptyCache cannot return them, so they measure fragmentation.
//
// Reserved - Allocated - InactiveSplit is what EmptyCache would return.
// ByCategory holds requested bytes per category. Blocks of size 0 are
// counted nowhere.
type Stats struct {
	Allocated     Stat
	Requested     Stat
	Reserved      Stat
	Active        Stat
	InactiveSplit Stat

	// LiveBlocks and Segments count live blocks and segments held from Raw.
	LiveBlocks Stat
	Segments   Stat

	// Allocs and Frees count successful Alloc and Free calls of non-empty
	// blocks; CacheHits counts allocations served without a new segment;
	// RawAllocs and RawFrees count segments taken from and given back to
	// Raw; Retries counts refusals by Raw followed by a retry after
	// releasing idle segments; OOMs counts failed allocations.
	Allocs, Frees, CacheHits, RawAllocs, RawFrees, Retries, OOMs int64

	ByCategory [NumCategories]Stat
}

// Category returns the requested-bytes stat of category c.
func (s Stats) Category(c Category) Stat {
	if c < NumCategories {
		return s.ByCategory[c]
	}
	return Stat{}
}

func (s *Stats) resetPeaks() {
	for _, st := range []*Stat{&s.Allocated, &s.Requested, &s.Reserved, &s.Active, &s.InactiveSplit, &s.LiveBlocks, &s.Segments} {
		st.resetPeak()
	}
	for i := range s.ByCategory {
		s.ByCategory[i].resetPeak()
	}
}
