package memory

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const (
	KiB = int64(1) << 10
	MiB = int64(1) << 20
	GiB = int64(1) << 30
)

func newTestAllocator(capacity int64) (*Allocator, *CountingRaw) {
	raw := NewCountingRaw(capacity, "test")
	return New(raw), raw
}

func mustAlloc(t testing.TB, a *Allocator, size int64, cat Category) *Block {
	t.Helper()
	b, err := a.Alloc(size, cat)
	if err != nil {
		t.Fatalf("Alloc(%d, %s): %v", size, cat, err)
	}
	return b
}

func checkInvariants(t testing.TB, a *Allocator) {
	t.Helper()
	if err := a.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// mustPanic runs f and returns the panic message, failing if f returns.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("no panic")
		}
		msg, _ = r.(string)
	}()
	f()
	return ""
}

func TestRoundSize(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{1, 512}, {511, 512}, {512, 512}, {513, 1024}, {1000, 1024},
		{MiB, MiB}, {MiB + 1, MiB + 512}, {10*MiB - 1, 10 * MiB},
	} {
		if got := RoundSize(tc.n); got != tc.want {
			t.Errorf("RoundSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestSegmentSize(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{1, 2 * MiB}, {MiB, 2 * MiB}, {MiB + 1, 20 * MiB}, {5 * MiB, 20 * MiB},
		{10*MiB - 513, 20 * MiB}, {10*MiB - 1, 10 * MiB}, {10 * MiB, 10 * MiB},
		{11 * MiB, 12 * MiB}, {12 * MiB, 12 * MiB}, {25*MiB + 1, 26 * MiB},
	} {
		if got := SegmentSize(tc.n); got != tc.want {
			t.Errorf("SegmentSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestPoolChoice allocates one block on a fresh allocator and checks the
// block's size, the segment taken from Raw and its pool.
func TestPoolChoice(t *testing.T) {
	for _, tc := range []struct {
		name           string
		request        int64
		size, segment  int64
		pool           Pool
		splitRemainder bool
	}{
		{"1 B", 1, 512, 2 * MiB, SmallPool, true},
		{"512 B", 512, 512, 2 * MiB, SmallPool, true},
		{"513 B", 513, 1024, 2 * MiB, SmallPool, true},
		{"1 MiB is small", MiB, MiB, 2 * MiB, SmallPool, true},
		{"1 MiB + 1 is large", MiB + 1, MiB + 512, 20 * MiB, LargePool, true},
		{"5 MiB", 5 * MiB, 5 * MiB, 20 * MiB, LargePool, true},
		{"just under 10 MiB", 10*MiB - 513, 10*MiB - 512, 20 * MiB, LargePool, true},
		{"rounds to 10 MiB", 10*MiB - 1, 10 * MiB, 10 * MiB, LargePool, false},
		{"10 MiB own segment", 10 * MiB, 10 * MiB, 10 * MiB, LargePool, false},
		{"11 MiB keeps 1 MiB rest", 11 * MiB, 12 * MiB, 12 * MiB, LargePool, false},
		{"12.5 MiB splits 1.5 MiB rest", 12*MiB + MiB/2, 12*MiB + MiB/2, 14 * MiB, LargePool, true},
		{"25 MiB + 1", 25*MiB + 1, 26 * MiB, 26 * MiB, LargePool, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, raw := newTestAllocator(0)
			b := mustAlloc(t, a, tc.request, Data)
			if b.Size() != tc.size || b.Requested() != tc.request || b.Offset() != 0 || b.Segment() != b.Ptr() {
				t.Errorf("block size %d requested %d offset %d, want size %d requested %d offset 0",
					b.Size(), b.Requested(), b.Offset(), tc.size, tc.request)
			}
			if a.Reserved() != tc.segment || raw.Live() != tc.segment || raw.AllocCalls() != 1 {
				t.Errorf("reserved %d (raw %d in %d calls), want one segment of %d", a.Reserved(), raw.Live(), raw.AllocCalls(), tc.segment)
			}
			snap := a.Snapshot()
			if len(snap.Segments) != 1 || snap.Segments[0].Pool != tc.pool {
				t.Fatalf("segments %+v, want one in the %s pool", snap.Segments, tc.pool)
			}
			if got := len(snap.Segments[0].Blocks) == 2; got != tc.splitRemainder {
				t.Errorf("remainder split = %v, want %v (blocks %+v)", got, tc.splitRemainder, snap.Segments[0].Blocks)
			}
			s := a.Stats()
			if s.Allocated.Current != tc.size || s.Requested.Current != tc.request || s.Category(Data).Current != tc.request {
				t.Errorf("stats allocated %d requested %d data %d", s.Allocated.Current, s.Requested.Current, s.Category(Data).Current)
			}
			checkInvariants(t, a)
			a.Free(b)
			checkInvariants(t, a)
		})
	}
}

func blocksOf(a *Allocator) []BlockInfo {
	snap := a.Snapshot()
	if len(snap.Segments) != 1 {
		return nil
	}
	return snap.Segments[0].Blocks
}

func sameBlocks(got, want []BlockInfo) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func TestSplitAndCoalesce(t *testing.T) {
	a, raw := newTestAllocator(0)
	x := mustAlloc(t, a, 1000, Activation)
	y := mustAlloc(t, a, 3000, Gradient)
	z := mustAlloc(t, a, 512, Parameter)
	if raw.AllocCalls() != 1 || x.Segment() != y.Segment() || y.Segment() != z.Segment() {
		t.Fatalf("three small blocks took %d raw allocations", raw.AllocCalls())
	}
	if x.Offset() != 0 || y.Offset() != 1024 || z.Offset() != 4096 {
		t.Fatalf("offsets %d %d %d, want 0 1024 4096", x.Offset(), y.Offset(), z.Offset())
	}
	if s := a.Stats(); s.CacheHits != 2 || s.RawAllocs != 1 {
		t.Fatalf("cache hits %d raw allocs %d, want 2 and 1", s.CacheHits, s.RawAllocs)
	}
	tail := 2*MiB - 4608
	steps := []struct {
		name string
		free *Block
		want []BlockInfo
	}{
		{"middle", y, []BlockInfo{
			{0, 1024, 1000, Activation, false}, {1024, 3072, 0, 0, true},
			{4096, 512, 512, Parameter, false}, {4608, tail, 0, 0, true}}},
		{"first merges with middle", x, []BlockInfo{
			{0, 4096, 0, 0, true}, {4096, 512, 512, Parameter, false}, {4608, tail, 0, 0, true}}},
		{"last merges both sides", z, []BlockInfo{{0, 2 * MiB, 0, 0, true}}},
	}
	for _, st := range steps {
		a.Free(st.free)
		checkInvariants(t, a)
		if got := blocksOf(a); !sameBlocks(got, st.want) {
			t.Fatalf("after freeing %s: blocks\n%+v\nwant\n%+v", st.name, got, st.want)
		}
	}
	if raw.FreeCalls() != 0 || a.Reserved() != 2*MiB {
		t.Fatalf("freeing blocks returned memory to Raw (%d frees, %d reserved)", raw.FreeCalls(), a.Reserved())
	}
}

func TestBestFit(t *testing.T) {
	a, _ := newTestAllocator(0)
	x1 := mustAlloc(t, a, KiB, Other)
	mustAlloc(t, a, 512, Other)
	big := mustAlloc(t, a, 4*KiB, Other)
	mustAlloc(t, a, 512, Other)
	x2 := mustAlloc(t, a, KiB, Other)
	mustAlloc(t, a, 512, Other)
	// Free holes of 1 KiB (x2 first, then x1) and 4 KiB, plus the tail.
	a.Free(x2)
	a.Free(big)
	a.Free(x1)
	checkInvariants(t, a)
	b := mustAlloc(t, a, 700, Other)
	if b.Ptr() != x1.Ptr() {
		t.Errorf("1 KiB request went to offset %d, want the lowest 1 KiB hole at %d", b.Offset(), x1.Offset())
	}
	c := mustAlloc(t, a, 2*KiB, Other)
	if c.Ptr() != big.Ptr() {
		t.Errorf("2 KiB request went to offset %d, want the 4 KiB hole at %d", c.Offset(), big.Offset())
	}
	checkInvariants(t, a)
}

func TestSplitThresholds(t *testing.T) {
	t.Run("small pool splits a 512 B rest", func(t *testing.T) {
		a, raw := newTestAllocator(0)
		mustAlloc(t, a, MiB, Other)
		b := mustAlloc(t, a, MiB-512, Other)
		if b.Size() != MiB-512 {
			t.Fatalf("size %d, want %d", b.Size(), MiB-512)
		}
		c := mustAlloc(t, a, 100, Other)
		if c.Offset() != 2*MiB-512 || raw.AllocCalls() != 1 {
			t.Fatalf("last 512 B: offset %d after %d raw allocations", c.Offset(), raw.AllocCalls())
		}
		checkInvariants(t, a)
	})
	t.Run("large pool keeps a 1 MiB rest", func(t *testing.T) {
		a, raw := newTestAllocator(0)
		mustAlloc(t, a, 5*MiB, Other) // 20 MiB segment, 15 MiB free
		b := mustAlloc(t, a, 14*MiB, Other)
		if b.Size() != 15*MiB || b.Requested() != 14*MiB || raw.AllocCalls() != 1 {
			t.Fatalf("size %d requested %d after %d raw allocations, want the whole 15 MiB rest from the cache",
				b.Size(), b.Requested(), raw.AllocCalls())
		}
		if s := a.Stats(); s.Allocated.Current != 20*MiB || s.Requested.Current != 19*MiB || s.InactiveSplit.Current != 0 {
			t.Fatalf("allocated %d requested %d inactive %d", s.Allocated.Current, s.Requested.Current, s.InactiveSplit.Current)
		}
		checkInvariants(t, a)
	})
	t.Run("large pool splits more than 1 MiB", func(t *testing.T) {
		a, _ := newTestAllocator(0)
		mustAlloc(t, a, 5*MiB, Other)
		b := mustAlloc(t, a, 13*MiB, Other)
		if b.Size() != 13*MiB || len(blocksOf(a)) != 3 {
			t.Fatalf("size %d, blocks %+v", b.Size(), blocksOf(a))
		}
		checkInvariants(t, a)
	})
	t.Run("small request does not use the large pool", func(t *testing.T) {
		a, raw := newTestAllocator(0)
		a.Free(mustAlloc(t, a, 5*MiB, Other))
		mustAlloc(t, a, KiB, Other)
		if raw.AllocCalls() != 2 || a.Reserved() != 22*MiB {
			t.Fatalf("%d raw allocations, reserved %d", raw.AllocCalls(), a.Reserved())
		}
	})
}

func TestFreedBlockIsReused(t *testing.T) {
	for _, size := range []int64{1000, 3 * MiB, 40 * MiB} {
		a, raw := newTestAllocator(0)
		b := mustAlloc(t, a, size, Activation)
		a.Free(b)
		if a.Allocated() != 0 || a.Reserved() == 0 || raw.FreeCalls() != 0 {
			t.Fatalf("%d: after free allocated %d reserved %d raw frees %d", size, a.Allocated(), a.Reserved(), raw.FreeCalls())
		}
		c := mustAlloc(t, a, size, Activation)
		s := a.Stats()
		if c.Ptr() != b.Ptr() || raw.AllocCalls() != 1 || s.RawAllocs != 1 || s.CacheHits != 1 || s.Allocs != 2 || s.Frees != 1 {
			t.Fatalf("%d: reuse gave %#x (first %#x), raw calls %d, stats %+v", size, c.Ptr(), b.Ptr(), raw.AllocCalls(), s)
		}
		checkInvariants(t, a)
	}
}

func TestEmptyCache(t *testing.T) {
	a, raw := newTestAllocator(0)
	small1 := mustAlloc(t, a, 1000, Other)
	large := mustAlloc(t, a, 5*MiB, Other)
	own := mustAlloc(t, a, 16*MiB, Other) // too big for the 15 MiB rest: its own segment
	small2 := mustAlloc(t, a, 2000, Other)
	if a.Reserved() != 2*MiB+20*MiB+16*MiB {
		t.Fatalf("reserved %d", a.Reserved())
	}
	a.Free(small1)
	a.Free(own)
	a.Free(large)
	a.EmptyCache()
	checkInvariants(t, a)
	s := a.Stats()
	if s.Reserved.Current != 2*MiB || raw.Live() != 2*MiB || s.RawFrees != 2 || s.Segments.Current != 1 {
		t.Fatalf("after EmptyCache reserved %d (raw %d), raw frees %d, segments %d; want the 2 MiB segment still in use",
			s.Reserved.Current, raw.Live(), s.RawFrees, s.Segments.Current)
	}
	if s.Reserved.Freed != 36*MiB || s.Reserved.Peak != 38*MiB {
		t.Fatalf("reserved totals %+v", s.Reserved)
	}
	a.Free(small2)
	a.EmptyCache()
	if a.Reserved() != 0 || raw.Live() != 0 || raw.Segments() != 0 {
		t.Fatalf("reserved %d, raw live %d", a.Reserved(), raw.Live())
	}
	checkInvariants(t, a)
	// The allocator still works after emptying.
	a.Free(mustAlloc(t, a, 100, Other))
	checkInvariants(t, a)
}

func TestOOMRetry(t *testing.T) {
	t.Run("retry after releasing idle segments succeeds", func(t *testing.T) {
		a, raw := newTestAllocator(21 * MiB)
		a.Free(mustAlloc(t, a, 5*MiB, Other)) // an idle 20 MiB segment
		b := mustAlloc(t, a, KiB, Other)      // needs a 2 MiB segment: 22 MiB > 21 MiB
		s := a.Stats()
		if b.Size() != KiB || s.Retries != 1 || s.OOMs != 0 || s.RawFrees != 1 || raw.AllocCalls() != 3 || raw.FreeCalls() != 1 {
			t.Fatalf("retries %d OOMs %d raw frees %d raw calls %d/%d", s.Retries, s.OOMs, s.RawFrees, raw.AllocCalls(), raw.FreeCalls())
		}
		if s.Reserved.Current != 2*MiB {
			t.Fatalf("reserved %d, want 2 MiB", s.Reserved.Current)
		}
		checkInvariants(t, a)
	})
	t.Run("OOM only after the retry", func(t *testing.T) {
		a, raw := newTestAllocator(20 * MiB)
		held := mustAlloc(t, a, 15*MiB, Activation) // a 16 MiB segment, not split
		idle := mustAlloc(t, a, 600, Other)         // its small segment becomes idle
		a.Free(idle)
		before := a.Stats()
		_, err := a.Alloc(5*MiB, Temporary) // neither a 20 MiB segment nor a tight 5 MiB one fits
		var oom *OOMError
		if !errors.As(err, &oom) {
			t.Fatalf("error %v (%T), want *OOMError", err, err)
		}
		s := a.Stats()
		if s.Retries != 1 || s.OOMs != 1 || raw.AllocCalls() != 5 || raw.Failures() != 3 {
			t.Fatalf("retries %d OOMs %d raw calls %d failures %d; want 1, 1, 5, 3", s.Retries, s.OOMs, raw.AllocCalls(), raw.Failures())
		}
		if s.RawFrees != 1 || s.Reserved.Current != 16*MiB || s.Allocated != before.Allocated || s.Allocs != before.Allocs {
			t.Fatalf("after OOM: raw frees %d reserved %d allocated %+v", s.RawFrees, s.Reserved.Current, s.Allocated)
		}
		want := OOMError{Requested: 5 * MiB, Size: 5 * MiB, Category: Temporary, Capacity: 20 * MiB,
			Allocated: 16 * MiB, Reserved: 16 * MiB, Free: 4 * MiB, Device: "test"}
		want.ByCategory[Activation] = 15 * MiB
		got := *oom
		got.Err = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("OOMError\n%+v\nwant\n%+v", got, want)
		}
		if oom.Err == nil || errors.Unwrap(err) != oom.Err {
			t.Fatalf("OOMError does not carry Raw's refusal")
		}
		checkInvariants(t, a)
		a.Free(held)
	})
	t.Run("a tight segment when a whole one does not fit", func(t *testing.T) {
		a, raw := newTestAllocator(20 * MiB)
		held := mustAlloc(t, a, 15*MiB, Activation)
		b := mustAlloc(t, a, 2*MiB, Temporary) // 4 MiB free: no 20 MiB segment, but 2 MiB fits
		s := a.Stats()
		if s.OOMs != 0 || s.Retries != 1 || s.Reserved.Current != 18*MiB || raw.Failures() != 2 {
			t.Fatalf("OOMs %d retries %d reserved %d failures %d", s.OOMs, s.Retries, s.Reserved.Current, raw.Failures())
		}
		checkInvariants(t, a)
		a.Free(b)
		a.Free(held)
	})
	t.Run("request larger than capacity fails fast", func(t *testing.T) {
		a, raw := newTestAllocator(21 * MiB)
		_, err := a.Alloc(21*MiB+1, Activation)
		var oom *OOMError
		if !errors.As(err, &oom) {
			t.Fatalf("error %v, want *OOMError", err)
		}
		s := a.Stats()
		if raw.AllocCalls() != 0 || s.Retries != 0 || s.OOMs != 1 || oom.Err != nil {
			t.Fatalf("raw calls %d retries %d OOMs %d", raw.AllocCalls(), s.Retries, s.OOMs)
		}
		if !strings.Contains(err.Error(), "the request alone exceeds the capacity") {
			t.Fatalf("message %q does not say the request alone is too big", err)
		}
	})
	t.Run("huge request on unlimited device", func(t *testing.T) {
		a, _ := newTestAllocator(0)
		_, err := a.Alloc(1<<63-1, Other)
		var oom *OOMError
		if !errors.As(err, &oom) {
			t.Fatalf("error %v, want *OOMError", err)
		}
		if !strings.Contains(err.Error(), "unlimited capacity") || !strings.Contains(err.Error(), "free unknown") {
			t.Fatalf("message %q", err)
		}
	})
	t.Run("segments never exceed capacity", func(t *testing.T) {
		a, raw := newTestAllocator(MiB)
		b := mustAlloc(t, a, 1000, Other)
		c := mustAlloc(t, a, 1000, Other)
		if b.Size() != 1024 || raw.Live() != 2048 || c.Segment() == b.Segment() {
			t.Fatalf("block %d in segment of %d bytes", b.Size(), raw.Live())
		}
		checkInvariants(t, a)
	})
}

func TestInactiveSplit(t *testing.T) {
	a, _ := newTestAllocator(0)
	var bs []*Block
	for range 4 {
		bs = append(bs, mustAlloc(t, a, 256*KiB, Activation))
	}
	if got := a.Stats().InactiveSplit.Current; got != 2*MiB-MiB {
		t.Fatalf("inactive split %d with 1 MiB live in a 2 MiB segment", got)
	}
	a.Free(bs[0])
	a.Free(bs[2])
	s := a.Stats()
	if s.InactiveSplit.Current != 2*MiB-512*KiB || s.Allocated.Current != 512*KiB || s.Reserved.Current != 2*MiB {
		t.Fatalf("inactive split %d allocated %d", s.InactiveSplit.Current, s.Allocated.Current)
	}
	// A 512 KiB request cannot use the two 256 KiB holes.
	big := mustAlloc(t, a, 512*KiB, Activation)
	if big.Offset() != MiB {
		t.Fatalf("512 KiB block at offset %d, want the tail at 1 MiB", big.Offset())
	}
	a.Free(bs[1])
	a.Free(bs[3])
	a.Free(big)
	s = a.Stats()
	if s.InactiveSplit.Current != 0 || s.InactiveSplit.Peak != 2*MiB-256*KiB { // after the first block
		t.Fatalf("inactive split %+v after freeing everything", s.InactiveSplit)
	}
	// A fully free segment is cached, not fragmentation.
	mustAlloc(t, a, 5*MiB, Other)
	if got := a.Stats().InactiveSplit.Current; got != 15*MiB {
		t.Fatalf("inactive split %d, want the 15 MiB rest of the large segment", got)
	}
	checkInvariants(t, a)
}

func TestPeaksAndResetPeak(t *testing.T) {
	a, _ := newTestAllocator(0)
	x := mustAlloc(t, a, MiB, Activation)
	y := mustAlloc(t, a, 3*MiB, Activation)
	p := mustAlloc(t, a, 1000, Parameter)
	a.Free(y)
	s := a.Stats()
	if s.Allocated.Current != MiB+1024 || s.Allocated.Peak != 4*MiB+1024 || a.MaxAllocated() != 4*MiB+1024 {
		t.Fatalf("allocated %+v", s.Allocated)
	}
	if s.Requested.Peak != 4*MiB+1000 || s.Category(Activation).Peak != 4*MiB || s.Category(Activation).Current != MiB {
		t.Fatalf("requested %+v activation %+v", s.Requested, s.Category(Activation))
	}
	if s.Allocated.Allocated != 4*MiB+1024 || s.Allocated.Freed != 3*MiB || s.Category(Activation).Freed != 3*MiB {
		t.Fatalf("running totals %+v %+v", s.Allocated, s.Category(Activation))
	}
	if s.Reserved.Peak != 22*MiB || a.MaxReserved() != 22*MiB {
		t.Fatalf("reserved %+v", s.Reserved)
	}
	a.EmptyCache()
	a.ResetPeak()
	s = a.Stats()
	all := []Stat{s.Allocated, s.Requested, s.Reserved, s.Active, s.InactiveSplit, s.LiveBlocks, s.Segments}
	all = append(all, s.ByCategory[:]...)
	for i, st := range all {
		if st.Peak != st.Current {
			t.Errorf("stat %d: peak %d after ResetPeak, current %d", i, st.Peak, st.Current)
		}
	}
	if a.MaxAllocated() != a.Allocated() || a.MaxReserved() != a.Reserved() || a.Reserved() != 2*MiB {
		t.Fatalf("max allocated %d reserved %d", a.MaxAllocated(), a.MaxReserved())
	}
	// Running totals survive ResetPeak.
	if s.Allocated.Allocated != 4*MiB+1024 {
		t.Fatalf("ResetPeak cleared running totals: %+v", s.Allocated)
	}
	a.Free(x)
	a.Free(p)
	if s := a.Stats(); s.Allocated.Peak != MiB+1024 {
		t.Fatalf("peak %d after reset and frees", s.Allocated.Peak)
	}
}

func TestRecategorize(t *testing.T) {
	a, _ := newTestAllocator(0)
	b := mustAlloc(t, a, 1000, Activation)
	a.Recategorize(b, Parameter)
	s := a.Stats()
	if b.Category() != Parameter || s.Category(Activation).Current != 0 || s.Category(Parameter).Current != 1000 {
		t.Fatalf("after Recategorize: category %s, activation %+v, parameter %+v", b.Category(), s.Category(Activation), s.Category(Parameter))
	}
	if s.Category(Activation).Freed != 1000 || s.Category(Parameter).Peak != 1000 || s.Requested.Current != 1000 {
		t.Fatalf("totals: activation %+v parameter %+v", s.Category(Activation), s.Category(Parameter))
	}
	a.Recategorize(b, Parameter) // no-op
	checkInvariants(t, a)
	a.Free(b)
	if got := a.Stats().Category(Parameter).Current; got != 0 {
		t.Fatalf("parameter bytes %d after free", got)
	}
	if msg := mustPanic(t, func() { a.Recategorize(b, Gradient) }); !strings.Contains(msg, "freed") {
		t.Fatalf("panic %q", msg)
	}
	a.Recategorize(nil, Gradient)
	z := mustAlloc(t, a, 0, Data)
	a.Recategorize(z, Gradient)
	if z.Category() != Gradient || a.Stats().Category(Gradient).Current != 0 {
		t.Fatal("empty block recategorized wrongly")
	}
}

func TestBadUse(t *testing.T) {
	a, _ := newTestAllocator(0)
	other, _ := newTestAllocator(0)

	a.Free(nil)
	b := mustAlloc(t, a, 100, Activation)
	a.Free(b)
	if msg := mustPanic(t, func() { a.Free(b) }); !strings.Contains(msg, "double free") || !strings.Contains(msg, "activation") {
		t.Errorf("double free panic %q", msg)
	}
	c := mustAlloc(t, a, 100, Other)
	if msg := mustPanic(t, func() { other.Free(c) }); !strings.Contains(msg, "did not hand out") {
		t.Errorf("foreign free panic %q", msg)
	}
	if msg := mustPanic(t, func() { a.Free(&Block{}) }); !strings.Contains(msg, "did not hand out") {
		t.Errorf("zero block free panic %q", msg)
	}
	if _, err := a.Alloc(-1, Other); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative size: %v", err)
	} else if _, ok := err.(*OOMError); ok {
		t.Errorf("negative size reported as OOM")
	}
	if _, err := a.Alloc(1, NumCategories); err == nil || !strings.Contains(err.Error(), "category") {
		t.Errorf("bad category: %v", err)
	}
	if msg := mustPanic(t, func() { a.Recategorize(c, NumCategories+1) }); !strings.Contains(msg, "unknown category") {
		t.Errorf("bad recategorize panic %q", msg)
	}
	a.Free(c)
	checkInvariants(t, a)
}

func TestZeroSize(t *testing.T) {
	a, raw := newTestAllocator(0)
	b := mustAlloc(t, a, 0, Activation)
	if b.Size() != 0 || b.Ptr() != 0 || b.Requested() != 0 || b.Category() != Activation {
		t.Fatalf("empty block %+v", b)
	}
	if s := a.Stats(); s != (Stats{}) || raw.AllocCalls() != 0 {
		t.Fatalf("empty block was counted: %+v", s)
	}
	a.Free(b)
	if s := a.Stats(); s != (Stats{}) {
		t.Fatalf("freeing an empty block was counted: %+v", s)
	}
	if msg := mustPanic(t, func() { a.Free(b) }); !strings.Contains(msg, "double free") {
		t.Fatalf("double free of an empty block: %q", msg)
	}
}

func TestCategoryNames(t *testing.T) {
	want := []string{"other", "parameter", "gradient", "optimizer_state", "activation", "temporary", "data", "kv_cache"}
	for c := range NumCategories {
		if c.String() != want[c] {
			t.Errorf("Category(%d) = %q, want %q", c, c.String(), want[c])
		}
		back, err := ParseCategory(c.String())
		if err != nil || back != c {
			t.Errorf("ParseCategory(%q) = %v, %v", c.String(), back, err)
		}
		if (Hint(c) == "") != (c == Other) {
			t.Errorf("Hint(%s) = %q", c, Hint(c))
		}
	}
	if _, err := ParseCategory("weights"); err == nil || !strings.Contains(err.Error(), `"weights"`) {
		t.Errorf("ParseCategory(weights): %v", err)
	}
	if got := NumCategories.String(); got != "category(8)" {
		t.Errorf("NumCategories.String() = %q", got)
	}
}

func TestAllocFreeAllocations(t *testing.T) {
	a, _ := newTestAllocator(0)
	keep := mustAlloc(t, a, 4*KiB, Other) // keeps the segment split
	n := testing.AllocsPerRun(1000, func() {
		b, _ := a.Alloc(4*KiB, Activation)
		a.Free(b)
	})
	if n > 1 {
		t.Errorf("Alloc+Free cost %.1f heap allocations, want at most 1 (the Block)", n)
	}
	a.Free(keep)
}

// TestInterrupt: after Interrupt every request fails with an
// *InterruptError wrapping the reason, frees still work, and
// Interrupt(nil) serves requests again.
func TestInterrupt(t *testing.T) {
	a := New(NewCountingRaw(0, "test"))
	b, err := a.Alloc(100, Activation)
	if err != nil {
		t.Fatal(err)
	}
	a.Interrupt(context.Canceled)
	if _, err := a.Alloc(100, Activation); !errors.Is(err, context.Canceled) {
		t.Fatalf("Alloc after Interrupt: %v, want context.Canceled", err)
	} else if ie := (*InterruptError)(nil); !errors.As(err, &ie) || ie.Device != "test" {
		t.Errorf("Alloc after Interrupt: %v, want an *InterruptError naming the device", err)
	}
	if !errors.Is(a.Interrupted(), context.Canceled) {
		t.Errorf("Interrupted() = %v", a.Interrupted())
	}
	a.Free(b)
	a.Interrupt(nil)
	if b, err = a.Alloc(100, Activation); err != nil {
		t.Fatalf("Alloc after Interrupt(nil): %v", err)
	}
	a.Free(b)
	if a.Allocated() != 0 {
		t.Errorf("%d bytes allocated after freeing everything", a.Allocated())
	}
}
