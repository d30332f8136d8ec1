package memory

import (
	"testing"
)

func TestHistory(t *testing.T) {
	a, _ := newTestAllocator(4 * MiB)
	if h := a.History(); h != nil {
		t.Fatalf("history recorded while disabled: %v", h)
	}
	a.EnableHistory(5)
	a.SetStep(3)
	b := mustAlloc(t, a, 1000, Activation) // segment_alloc, alloc
	a.SetStep(4)
	a.Free(b) // free
	// oom (8 MiB cannot fit in 4 MiB)
	if _, err := a.Alloc(8*MiB, Gradient); err == nil {
		t.Fatal("8 MiB fit in 4 MiB")
	}
	a.EmptyCache() // segment_free
	seg := b.Segment()
	want := []Event{
		{Kind: EventSegmentAlloc, Ptr: seg, Size: 2 * MiB, Requested: 1000, Category: Activation, Step: 3},
		{Kind: EventAlloc, Ptr: b.Ptr(), Size: 1024, Requested: 1000, Category: Activation, Step: 3},
		{Kind: EventFree, Ptr: b.Ptr(), Size: 1024, Requested: 1000, Category: Activation, Step: 4},
		{Kind: EventOOM, Size: 8 * MiB, Requested: 8 * MiB, Category: Gradient, Step: 4},
		{Kind: EventSegmentFree, Ptr: seg, Size: 2 * MiB, Category: Other, Step: 4},
	}
	got := a.History()
	if len(got) != len(want) {
		t.Fatalf("history has %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range got {
		if got[i].Time.IsZero() {
			t.Errorf("event %d has no time", i)
		}
		if i > 0 && got[i].Time.Before(got[i-1].Time) {
			t.Errorf("event %d is older than event %d", i, i-1)
		}
		got[i].Time = want[i].Time
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// The ring keeps the last 5.
	c := mustAlloc(t, a, 600, Data)
	got = a.History()
	if len(got) != 5 || got[0].Kind != EventFree || got[3].Kind != EventSegmentAlloc || got[4].Kind != EventAlloc || got[4].Ptr != c.Ptr() {
		t.Fatalf("after wrap: %+v", got)
	}
	if a.Step() != 4 {
		t.Fatalf("Step() = %d", a.Step())
	}
	a.EnableHistory(0)
	a.Free(c)
	if h := a.History(); h != nil {
		t.Fatalf("history after disabling: %v", h)
	}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[EventKind]string{
		EventAlloc: "alloc", EventFree: "free", EventSegmentAlloc: "segment_alloc",
		EventSegmentFree: "segment_free", EventOOM: "oom", EventKind(99): "event(?)",
	} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", k, k.String(), want)
		}
	}
}

func TestSnapshot(t *testing.T) {
	a, _ := newTestAllocator(0)
	a.SetStep(9)
	x := mustAlloc(t, a, 5*MiB, Parameter)
	y := mustAlloc(t, a, 100, Gradient)
	z := mustAlloc(t, a, 300, Gradient)
	a.Free(y)
	s := a.Snapshot()
	if s.Device != "test" || s.Capacity != 0 || s.Step != 9 || s.Stats != a.Stats() {
		t.Fatalf("snapshot header %+v", s)
	}
	if len(s.Segments) != 2 || s.Segments[0].Address >= s.Segments[1].Address {
		t.Fatalf("segments not in address order: %+v", s.Segments)
	}
	large, small := s.Segments[0], s.Segments[1]
	if large.Pool != LargePool || large.Address != x.Segment() || large.Size != 20*MiB || large.Allocated() != 5*MiB {
		t.Fatalf("large segment %+v", large)
	}
	wantLarge := []BlockInfo{{0, 5 * MiB, 5 * MiB, Parameter, false}, {5 * MiB, 15 * MiB, 0, Other, true}}
	if !sameBlocks(large.Blocks, wantLarge) {
		t.Fatalf("large blocks %+v", large.Blocks)
	}
	wantSmall := []BlockInfo{{0, 512, 0, Other, true}, {512, 512, 300, Gradient, false}, {1024, 2*MiB - 1024, 0, Other, true}}
	if small.Pool != SmallPool || small.Address != z.Segment() || !sameBlocks(small.Blocks, wantSmall) {
		t.Fatalf("small segment %+v", small)
	}
	if SmallPool.String() != "small" || LargePool.String() != "large" {
		t.Fatal("pool names")
	}
}

// SetModule labels a block's site (and its alloc event) with the module
// that made it; the first module named sticks; with history off it does
// nothing.
func TestSetModule(t *testing.T) {
	a := New(NewCountingRaw(64*MiB, "meta"))
	a.SetSiteFunc(func() string { return "nn/linear.go:63" })
	off, _ := a.Alloc(MiB, Activation)
	a.SetModule(off, "blocks.0.fc") // history off: nothing
	a.EnableHistory(100)
	b, _ := a.Alloc(MiB, Activation)
	a.SetModule(b, "blocks.1.fc")
	a.SetModule(b, "blocks.1") // an outer layer handing it on
	want := "blocks.1.fc · nn/linear.go:63"
	if got := a.Snapshot().Sites[b.Ptr()]; got != want {
		t.Errorf("snapshot site %q, want %q", got, want)
	}
	h := a.History()
	if len(h) != 1 || h[0].Kind != EventAlloc || h[0].Site != want {
		t.Errorf("history %+v, want one alloc event at %q", h, want)
	}
	a.Free(b)
	if h := a.History(); h[len(h)-1].Site != want {
		t.Errorf("free event site %q, want %q", h[len(h)-1].Site, want)
	}
	a.Free(off)
}
