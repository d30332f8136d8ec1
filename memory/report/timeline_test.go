package report

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/memory"
)

// TestTimelineReplay drives an allocator at random, with a history too short
// to hold every event, and checks every replayed point against the
// allocator's own figures taken after each event.
func TestTimelineReplay(t *testing.T) {
	for _, ring := range []int{10_000, 300} {
		a := memory.New(memory.NewCountingRaw(256*mib, "meta"))
		a.SetSiteFunc(func() string { return "x.go:1" })
		r := rand.New(rand.NewPCG(7, uint64(ring)))
		var live []*memory.Block
		type check struct {
			point    int // the point after an operation's last event
			byCat    [memory.NumCategories]int64
			reserved int64
		}
		var byCat [memory.NumCategories]int64
		var checks []check
		record := func() {
			if n := len(a.History()); a.HistoryEnabled() && n < ring {
				checks = append(checks, check{n, byCat, a.Stats().Reserved.Current})
			}
		}
		randomSize := func() int64 {
			if r.IntN(10) == 0 {
				return r.Int64N(12 * mib)
			}
			return 1 + r.Int64N(200*kib)
		}
		for i := range 400 {
			if i == 50 {
				a.EnableHistory(ring)
			}
			a.SetStep(int64(i / 40))
			switch k := r.IntN(10); {
			case k < 5 || len(live) == 0:
				cat := memory.Category(r.IntN(int(memory.NumCategories)))
				b, err := a.Alloc(randomSize(), cat)
				if err != nil {
					continue
				}
				byCat[cat] += b.Size()
				live = append(live, b)
			case k < 9:
				j := r.IntN(len(live))
				b := live[j]
				byCat[b.Category()] -= b.Size()
				a.Free(b)
				live = append(live[:j], live[j+1:]...)
			case k == 9:
				b := live[r.IntN(len(live))]
				cat := memory.Category(r.IntN(int(memory.NumCategories)))
				byCat[b.Category()] -= b.Size()
				byCat[cat] += b.Size()
				a.Recategorize(b, cat)
			}
			record()
			if r.IntN(50) == 0 {
				a.EmptyCache()
				record()
			}
		}
		s := a.Snapshot()
		tl := NewTimeline(s)
		if len(tl.Points) != len(s.History)+1 {
			t.Fatalf("ring %d: %d points for %d events", ring, len(tl.Points), len(s.History))
		}
		last := tl.Points[len(tl.Points)-1]
		if last.Allocated() != s.Stats.Allocated.Current || last.Reserved != s.Stats.Reserved.Current {
			t.Errorf("ring %d: last point %+v, allocator %d allocated %d reserved", ring, last, s.Stats.Allocated.Current, s.Stats.Reserved.Current)
		}
		if last.ByCategory != byCat {
			t.Errorf("ring %d: last point by category %v, want %v", ring, last.ByCategory, byCat)
		}
		for i, p := range tl.Points {
			for c, n := range p.ByCategory {
				if n < 0 {
					t.Fatalf("ring %d: point %d: %s is %d", ring, i, memory.Category(c), n)
				}
			}
			if p.Allocated() > p.Reserved {
				t.Fatalf("ring %d: point %d: %d allocated > %d reserved", ring, i, p.Allocated(), p.Reserved)
			}
		}
		if ring == 10_000 {
			// The whole history was kept: every point is known.
			if len(checks) < 300 {
				t.Fatalf("only %d checks", len(checks))
			}
			for _, c := range checks {
				if p := tl.Points[c.point]; p.ByCategory != c.byCat || p.Reserved != c.reserved {
					t.Fatalf("point %d: %+v, want %+v", c.point, p, c)
				}
			}
		}
		// The peak's sites add up to the peak.
		var sum int64
		for _, g := range tl.Peak.Sites {
			sum += g.Bytes
		}
		if sum != tl.Peak.Allocated || tl.Peak.Point.Allocated() != tl.Peak.Allocated {
			t.Errorf("ring %d: peak %d, its sites add up to %d", ring, tl.Peak.Allocated, sum)
		}
		for i, p := range tl.Points {
			if p.Allocated() > tl.Peak.Allocated || p.Allocated() == tl.Peak.Allocated && i < tl.Peak.Index {
				t.Fatalf("ring %d: point %d (%d) beats the peak %d at %d", ring, i, p.Allocated(), tl.Peak.Allocated, tl.Peak.Index)
			}
		}
		// Steps tile the points.
		next := 0
		for _, sp := range tl.Steps {
			if sp.First != next || sp.Last < sp.First {
				t.Fatalf("ring %d: step spans %+v", ring, tl.Steps)
			}
			next = sp.Last + 1
		}
		if next != len(tl.Points) {
			t.Fatalf("ring %d: step spans end at %d of %d points", ring, next, len(tl.Points))
		}
		for _, b := range live {
			a.Free(b)
		}
	}
}

func TestTimelineWithoutHistory(t *testing.T) {
	a := memory.New(memory.NewCountingRaw(0, "meta"))
	b, _ := a.Alloc(1000, memory.Data)
	defer a.Free(b)
	tl := NewTimeline(a.Snapshot())
	if len(tl.Points) != 1 || tl.Points[0].ByCategory[memory.Data] != 1024 || len(tl.Events) != 0 {
		t.Fatalf("timeline %+v", tl)
	}
	if tl.Peak.Allocated != 1024 || len(tl.Peak.Sites) != 1 || tl.Peak.Sites[0].Site != "" {
		t.Fatalf("peak %+v", tl.Peak)
	}
}

func TestSample(t *testing.T) {
	tl := &Timeline{}
	for i := range 1000 {
		var p Point
		p.ByCategory[memory.Activation] = int64(i % 100)
		p.Reserved = int64(i)
		tl.Points = append(tl.Points, p)
	}
	s := tl.sample(10)
	if len(s) != 10 {
		t.Fatalf("%d samples", len(s))
	}
	for k, x := range s {
		if x.from != 100*k || x.to != 100*(k+1) || x.index != 100*k+99 || x.reserved != int64(100*k+99) {
			t.Errorf("sample %d: %+v", k, x)
		}
	}
	if s := tl.sample(5000); len(s) != 1000 {
		t.Errorf("%d samples of 1000 points", len(s))
	}
}

func TestAxes(t *testing.T) {
	for _, c := range []struct {
		top    int64
		labels string
	}{
		{100, "0 20 B 40 B 60 B 80 B 100 B"},
		{6*mib + 1, "0 2 MiB 4 MiB 6 MiB 8 MiB"},
		{1536 * kib, "0 0.5 MiB 1 MiB 1.5 MiB"},
		{700 * kib, "0 200 KiB 400 KiB 600 KiB 800 KiB"},
		{3 * gib, "0 0.5 GiB 1 GiB 1.5 GiB 2 GiB 2.5 GiB 3 GiB"},
	} {
		ticks, unit, name := byteTicks(c.top, 6)
		var labels []string
		for _, v := range ticks {
			labels = append(labels, tickLabel(v, unit, name))
		}
		if got := strings.Join(labels, " "); got != c.labels || ticks[len(ticks)-1] < c.top {
			t.Errorf("byteTicks(%d): %v = %q, want %q", c.top, ticks, got, c.labels)
		}
	}
	if got := countTicks(3952, 8); len(got) != 8 || got[1] != 500 {
		t.Errorf("countTicks(3952, 8) = %v", got)
	}
	for n, want := range map[int]string{950: "950", 12000: "12k", 1_500_000: "1.5M"} {
		if got := countLabel(n); got != want {
			t.Errorf("countLabel(%d) = %q, want %q", n, got, want)
		}
	}
	if got := shortSite("/a/b/c/model.go:12"); got != "c/model.go:12" {
		t.Errorf("shortSite = %q", got)
	}
	if got := shortSite(""); got != "(site unknown)" {
		t.Errorf("shortSite of nothing = %q", got)
	}
	if got := fit("abcdefghij", 5); got != "…ghij" {
		t.Errorf("fit = %q", got)
	}
}

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)
