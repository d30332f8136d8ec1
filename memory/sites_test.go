package memory

import (
	"strings"
	"sync/atomic"
	"testing"
)

func TestSiteFunc(t *testing.T) {
	a, _ := newTestAllocator(0)
	var calls atomic.Int64
	a.SetSiteFunc(func() string { calls.Add(1); return "model.go:42" })
	x := mustAlloc(t, a, 1000, Activation)
	if calls.Load() != 0 {
		t.Fatalf("site function called %d times while history is off", calls.Load())
	}
	if s := a.Snapshot(); s.Sites != nil || s.History != nil {
		t.Fatalf("snapshot without history has sites %v, history %v", s.Sites, s.History)
	}

	a.EnableHistory(16)
	if !a.HistoryEnabled() {
		t.Fatal("HistoryEnabled false after EnableHistory")
	}
	y := mustAlloc(t, a, 3000, Gradient)
	mustAlloc(t, a, 0, Gradient) // empty blocks have no site
	if calls.Load() != 1 {
		t.Fatalf("site function called %d times for one block", calls.Load())
	}
	a.Recategorize(y, Temporary)
	a.Free(y)
	h := a.History()
	if len(h) != 3 {
		t.Fatalf("history %+v", h)
	}
	for i, want := range []Event{
		{Kind: EventAlloc, Ptr: y.Ptr(), Size: 3072, Requested: 3000, Category: Gradient, Site: "model.go:42"},
		{Kind: EventRecategorize, Ptr: y.Ptr(), Size: 3072, Requested: 3000, Category: Temporary, From: Gradient, Site: "model.go:42"},
		{Kind: EventFree, Ptr: y.Ptr(), Size: 3072, Requested: 3000, Category: Temporary, Site: "model.go:42"},
	} {
		h[i].Time = want.Time
		if h[i] != want {
			t.Errorf("event %d: %+v, want %+v", i, h[i], want)
		}
	}

	z := mustAlloc(t, a, 10, Data)
	s := a.Snapshot()
	if len(s.History) != 4 || s.History[3].Ptr != z.Ptr() {
		t.Fatalf("snapshot history %+v", s.History)
	}
	if len(s.Sites) != 1 || s.Sites[z.Ptr()] != "model.go:42" {
		t.Fatalf("snapshot sites %v, want only the block allocated with history on (%#x)", s.Sites, z.Ptr())
	}

	a.SetSiteFunc(nil)
	w := mustAlloc(t, a, 10, Data)
	if h := a.History(); h[len(h)-1].Site != "" {
		t.Errorf("site %q recorded without a site function", h[len(h)-1].Site)
	}
	a.EnableHistory(0)
	if a.HistoryEnabled() {
		t.Fatal("HistoryEnabled true after EnableHistory(0)")
	}
	for _, b := range []*Block{x, z, w} {
		a.Free(b)
	}
	if err := a.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotSummaryMatches(t *testing.T) {
	a, keep := fragmented(t)
	if got, want := a.Snapshot().Summary(), a.Summary(); got != want {
		t.Errorf("Snapshot().Summary() differs from Summary():\n%s\n%s", got, want)
	}
	if !strings.Contains(a.Snapshot().SegmentMap(), "segment map: 6 segments") {
		t.Error("snapshot's segment map")
	}
	for _, b := range keep {
		a.Free(b)
	}
}

func BenchmarkAllocFreeHistory(b *testing.B) {
	b.Run("history", func(b *testing.B) {
		a, _ := newTestAllocator(0)
		a.EnableHistory(1 << 12)
		b.ReportAllocs()
		for b.Loop() {
			blk, _ := a.Alloc(4*KiB, Activation)
			a.Free(blk)
		}
	})
	b.Run("history+site", func(b *testing.B) {
		a, _ := newTestAllocator(0)
		a.EnableHistory(1 << 12)
		a.SetSiteFunc(func() string { return "x.go:1" })
		b.ReportAllocs()
		for b.Loop() {
			blk, _ := a.Alloc(4*KiB, Activation)
			a.Free(blk)
		}
	})
}
