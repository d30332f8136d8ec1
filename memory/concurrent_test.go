package memory

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

// randomSize draws request sizes from every pool and segment class.
func randomSize(r *rand.Rand) int64 {
	switch r.IntN(10) {
	case 0:
		return 0
	case 1, 2, 3, 4:
		return 1 + r.Int64N(4*KiB)
	case 5, 6:
		return 1 + r.Int64N(MiB)
	case 7, 8:
		return MiB + 1 + r.Int64N(9*MiB)
	default:
		return 10*MiB + r.Int64N(10*MiB)
	}
}

func TestConcurrentAllocFree(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int64
	}{
		{"unlimited", 0},
		{"tight", 96 * MiB}, // some allocations fail with OOM
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, raw := newTestAllocator(tc.capacity)
			const workers, ops = 8, 1500
			var wg sync.WaitGroup
			var mu sync.Mutex
			var allocs, ooms int64
			for w := range workers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 42))
					var held []*Block
					var myAllocs, myOOMs int64
					for i := range ops {
						switch {
						case len(held) > 0 && (r.IntN(2) == 0 || len(held) > 12):
							j := r.IntN(len(held))
							a.Free(held[j])
							held[j] = held[len(held)-1]
							held = held[:len(held)-1]
						case len(held) > 0 && r.IntN(20) == 0:
							a.Recategorize(held[r.IntN(len(held))], Category(r.IntN(int(NumCategories))))
						default:
							b, err := a.Alloc(randomSize(r), Category(r.IntN(int(NumCategories))))
							var oom *OOMError
							if errors.As(err, &oom) {
								myOOMs++
								continue
							}
							if err != nil {
								t.Error(err)
								return
							}
							if b.Size() > 0 {
								myAllocs++
							}
							held = append(held, b)
						}
						switch i % 200 {
						case 0:
							_ = a.Stats()
						case 50:
							a.EmptyCache()
						case 100:
							_ = a.Summary()
						case 150:
							_ = a.Snapshot()
						}
					}
					for _, b := range held {
						a.Free(b)
					}
					mu.Lock()
					allocs += myAllocs
					ooms += myOOMs
					mu.Unlock()
				})
			}
			wg.Wait()
			checkInvariants(t, a)
			s := a.Stats()
			if s.Allocated.Current != 0 || s.Requested.Current != 0 || s.Active.Current != 0 || s.InactiveSplit.Current != 0 || s.LiveBlocks.Current != 0 {
				t.Fatalf("after freeing everything: %+v", s)
			}
			for c := range NumCategories {
				if s.ByCategory[c].Current != 0 || s.ByCategory[c].Allocated != s.ByCategory[c].Freed {
					t.Errorf("category %s: %+v", c, s.ByCategory[c])
				}
			}
			if s.Allocs != allocs || s.Frees != allocs || s.OOMs != ooms {
				t.Fatalf("allocs %d frees %d OOMs %d, workers counted %d allocs and %d OOMs", s.Allocs, s.Frees, s.OOMs, allocs, ooms)
			}
			if s.Allocated.Allocated != s.Allocated.Freed || s.Requested.Allocated != s.Requested.Freed {
				t.Fatalf("running totals disagree: %+v %+v", s.Allocated, s.Requested)
			}
			if raw.Live() != s.Reserved.Current || s.RawAllocs != s.RawFrees+s.Segments.Current {
				t.Fatalf("raw holds %d, reserved %d", raw.Live(), s.Reserved.Current)
			}
			if tc.capacity > 0 && raw.Peak() > tc.capacity {
				t.Fatalf("raw peak %d over capacity", raw.Peak())
			}
			a.EmptyCache()
			if a.Reserved() != 0 || raw.Live() != 0 {
				t.Fatalf("reserved %d after EmptyCache", a.Reserved())
			}
			t.Logf("%d allocs, %d cache hits, %d raw allocs, %d retries, %d OOMs", s.Allocs, s.CacheHits, s.RawAllocs, s.Retries, s.OOMs)
		})
	}
}

// TestRandomInvariants runs a long random sequence on one goroutine and
// checks the allocator's structure and statistics after every operation.
func TestRandomInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	a, raw := newTestAllocator(200 * MiB)
	var held []*Block
	live := map[Ptr]*Block{}
	ops := 3000
	if testing.Short() {
		ops = 500
	}
	for i := range ops {
		switch op := r.IntN(20); {
		case op < 9 && len(held) > 0:
			j := r.IntN(len(held))
			delete(live, held[j].Ptr())
			a.Free(held[j])
			held[j] = held[len(held)-1]
			held = held[:len(held)-1]
		case op == 9:
			a.EmptyCache()
		case op == 10:
			a.ResetPeak()
		default:
			b, err := a.Alloc(randomSize(r), Category(r.IntN(int(NumCategories))))
			if err != nil {
				var oom *OOMError
				if !errors.As(err, &oom) {
					t.Fatal(err)
				}
				continue
			}
			if b.Size() > 0 {
				if live[b.Ptr()] != nil {
					t.Fatalf("op %d: address %#x handed out twice", i, b.Ptr())
				}
				live[b.Ptr()] = b
			}
			held = append(held, b)
		}
		if err := a.checkInvariants(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if s := a.Stats(); raw.Live() != s.Reserved.Current || s.Allocated.Peak < s.Allocated.Current || s.Reserved.Peak < s.Reserved.Current {
			t.Fatalf("op %d: raw %d stats %+v", i, raw.Live(), s)
		}
	}
	for _, b := range held {
		a.Free(b)
	}
	checkInvariants(t, a)
}
