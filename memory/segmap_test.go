package memory

import (
	"strings"
	"testing"

	"github.com/memfit/memfit/internal/goldenfile"
)

// fragmented builds an allocator whose segments show every kind of cell of
// the segment map: full segments, a small-pool segment shared by several
// categories, scattered small survivors in a mostly free segment (lower
// case), and an idle segment.
func fragmented(t *testing.T) (*Allocator, []*Block) {
	t.Helper()
	a := New(NewCountingRaw(GiB, "cpu"))
	var keep []*Block
	keep = append(keep, mustAlloc(t, a, 12*MiB, Parameter)) // own 12 MiB segment
	keep = append(keep, mustAlloc(t, a, 12*MiB, Gradient))
	keep = append(keep, mustAlloc(t, a, 2*MiB+512*KiB, OptimizerState)) // 20 MiB large segment ...
	acts := make([]*Block, 6)
	for i := range acts {
		acts[i] = mustAlloc(t, a, 2*MiB, Activation) // ... shared with activations
	}
	for _, b := range acts[:5] {
		a.Free(b)
	}
	keep = append(keep, acts[5])
	// A small segment: data, a temporary and parameters side by side.
	keep = append(keep, mustAlloc(t, a, 600*KiB, Data))
	tmp := mustAlloc(t, a, 100*KiB, Temporary)
	keep = append(keep, mustAlloc(t, a, 300*KiB, Parameter))
	a.Free(tmp)
	// A second small segment, mostly free: a few scattered survivors.
	var small []*Block
	for range 32 {
		small = append(small, mustAlloc(t, a, 60*KiB, Activation))
	}
	// Fill the first small segment up, so that the 32 land in a second one.
	for i, b := range small {
		if i%8 != 0 {
			a.Free(b)
		} else {
			keep = append(keep, b)
		}
	}
	keep = append(keep, mustAlloc(t, a, 100, Other))
	a.Free(mustAlloc(t, a, 16*MiB, Temporary)) // an idle segment
	if err := a.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	return a, keep
}

func TestSegmentMap(t *testing.T) {
	a, keep := fragmented(t)
	got := a.SegmentMap()
	goldenfile.Check(t, "segmap.golden", got)
	for i, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if len(line) != summaryInner+2 {
			t.Errorf("line %d is %d characters wide, want %d: %q", i, len(line), summaryInner+2, line)
		}
	}
	for _, want := range []string{"[PPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPPP] 100%", "[........................................]   0%"} {
		if !strings.Contains(got, want) {
			t.Errorf("segment map lacks %q:\n%s", want, got)
		}
	}
	for _, b := range keep {
		a.Free(b)
	}
	a.EmptyCache()
	if got := a.SegmentMap(); !strings.Contains(got, "no segments") {
		t.Errorf("empty allocator's map:\n%s", got)
	}
}

func TestSegmentBarCells(t *testing.T) {
	seg := SegmentInfo{Size: 4000, Blocks: []BlockInfo{
		{Offset: 0, Size: 1000, Category: Parameter},
		{Offset: 1000, Size: 1500, Free: true},
		{Offset: 2500, Size: 10, Category: Data},
		{Offset: 2510, Size: 490, Free: true},
		{Offset: 3000, Size: 600, Category: Gradient},
		{Offset: 3600, Size: 400, Category: Activation},
	}}
	if got, want := segmentBar(seg, 4), "P.dG"; got != want {
		t.Errorf("bar %q, want %q", got, want)
	}
	if got, want := segmentBar(seg, 8), "PP...dGA"; got != want {
		t.Errorf("bar %q, want %q", got, want)
	}
}
