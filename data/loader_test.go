package data

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// collect ranges over one epoch of l and returns each batch's digest.
func collect(t *testing.T, l *Loader) [][32]byte {
	t.Helper()
	var out [][32]byte
	for b, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, batchHash(b))
	}
	return out
}

func TestLoaderDeterministicAcrossWorkers(t *testing.T) {
	ds := gridImages{n: 203, c: 1, h: 6, w: 6}
	cfg := LoaderConfig{Batch: 16, Shuffle: true, Seed: 42, Prefetch: 3,
		Transforms: []Transform{RandomCrop{Height: 5, Width: 5, Padding: 1}, RandomFlip{}}}
	var want [2][][32]byte
	for _, workers := range []int{0, 1, 2, 8} {
		for _, prefetch := range []int{0, 1, 3} {
			cfg.Workers, cfg.Prefetch = workers, prefetch
			for run := range 2 {
				l, err := NewLoader(ds, cfg)
				if err != nil {
					t.Fatal(err)
				}
				for epoch := range 2 {
					got := collect(t, l)
					if len(got) != 13 {
						t.Fatalf("%d batches, want 13", len(got))
					}
					if want[epoch] == nil {
						want[epoch] = got
					} else if !slices.Equal(got, want[epoch]) {
						t.Errorf("workers %d prefetch %d run %d epoch %d: batches differ from the first run", workers, prefetch, run, epoch)
					}
				}
			}
		}
	}
	same := 0
	for k := range want[0] {
		if want[0][k] == want[1][k] {
			same++
		}
	}
	if same > 0 {
		t.Errorf("epochs 0 and 1 share %d batches: shuffling does not change per epoch", same)
	}
}

func TestLoaderCoversEveryExampleOnce(t *testing.T) {
	for _, drop := range []bool{false, true} {
		ds := gridImages{n: 50, c: 1, h: 1, w: 1}
		l, err := NewLoader(ds, LoaderConfig{Batch: 8, Shuffle: true, Seed: 7, Workers: 3, Prefetch: 2, DropLast: drop})
		if err != nil {
			t.Fatal(err)
		}
		wantBatches := 7
		if drop {
			wantBatches = 6
		}
		if l.Len() != wantBatches {
			t.Errorf("drop-last %v: Len %d, want %d", drop, l.Len(), wantBatches)
		}
		seen := map[int]int{}
		k := 0
		for b, err := range l.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			if b.Index != k || b.Epoch != 0 {
				t.Errorf("batch %d arrives as epoch %d index %d", k, b.Epoch, b.Index)
			}
			k++
			for j, idx := range b.Indices {
				seen[idx]++
				if b.Inputs[j] != float32(idx*1000) || b.Targets[j] != int32(idx%10) {
					t.Errorf("example %d of batch %d holds %v/%d, want dataset index %d", j, b.Index, b.Inputs[j], b.Targets[j], idx)
				}
			}
			if want := []int{len(b.Indices), 1, 1, 1}; !slices.Equal(b.InputShape, want) {
				t.Errorf("input shape %v, want %v", b.InputShape, want)
			}
		}
		want := 50
		if drop {
			want = 48
		}
		if len(seen) != want {
			t.Errorf("drop-last %v: %d distinct examples, want %d", drop, len(seen), want)
		}
		for idx, c := range seen {
			if c != 1 {
				t.Errorf("example %d delivered %d times", idx, c)
			}
		}
		if p := l.Position(); p != (Position{1, 0}) {
			t.Errorf("after an epoch the loader stands at %+v, want epoch 1 batch 0", p)
		}
	}
}

func TestLoaderResume(t *testing.T) {
	ds := gridImages{n: 100, c: 1, h: 2, w: 2}
	cfg := LoaderConfig{Batch: 8, Shuffle: true, Seed: 3, Workers: 2, Prefetch: 2, Transforms: []Transform{RandomFlip{}}}
	a, _ := NewLoader(ds, cfg)
	collect(t, a)
	var saved []byte
	var rest [][32]byte
	for b, err := range a.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if b.Index == 4 {
			saved, _ = json.Marshal(a.Position()) // after step 4: resume at 5
		}
		if b.Index >= 5 {
			rest = append(rest, batchHash(b))
		}
	}
	var p Position
	if err := json.Unmarshal(saved, &p); err != nil {
		t.Fatal(err)
	}
	if p != (Position{1, 5}) {
		t.Fatalf("saved position %+v, want epoch 1 batch 5", p)
	}
	b, _ := NewLoader(ds, cfg)
	if err := b.Seek(p); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, b); !slices.Equal(got, rest) {
		t.Errorf("resumed loader delivers %d batches that differ from the original run's %d", len(got), len(rest))
	}
	if err := b.Seek(Position{0, 99}); err == nil {
		t.Error("Seek past the epoch's end: no error")
	}
}

func TestLoaderBreakStopsWorkers(t *testing.T) {
	before := runtime.NumGoroutine()
	ds := gridImages{n: 1000, c: 1, h: 4, w: 4}
	l, _ := NewLoader(ds, LoaderConfig{Batch: 4, Workers: 4, Prefetch: 4})
	n := 0
	for _, err := range l.All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	if p := l.Position(); p != (Position{0, 3}) {
		t.Errorf("after three batches the loader stands at %+v", p)
	}
	waitGoroutines(t, before)
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines remain, %d before", runtime.NumGoroutine(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowImages counts Get calls and sleeps in each.
type slowImages struct {
	gridImages
	gets  atomic.Int64
	delay time.Duration
}

func (s *slowImages) Get(i int) (Example, error) {
	s.gets.Add(1)
	time.Sleep(s.delay)
	return s.gridImages.Get(i)
}

func TestLoaderCancel(t *testing.T) {
	before := runtime.NumGoroutine()
	ds := &slowImages{gridImages: gridImages{n: 10000, c: 1, h: 2, w: 2}, delay: time.Millisecond}
	l, _ := NewLoader(ds, LoaderConfig{Batch: 8, Workers: 2, Prefetch: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	var last error
	for _, err := range l.All(ctx) {
		if err != nil {
			last = err
			break
		}
		if n++; n == 2 {
			cancel()
		}
		if n > 10 {
			t.Fatal("iteration goes on after cancellation")
		}
	}
	if !errors.Is(last, context.Canceled) {
		t.Errorf("error after cancel: %v, want context.Canceled", last)
	}
	waitGoroutines(t, before)
}

func TestLoaderPrefetchBound(t *testing.T) {
	for _, tc := range []struct{ workers, prefetch int }{{1, 0}, {2, 0}, {2, 1}, {4, 2}, {8, 3}, {2, 5}} {
		ds := &slowImages{gridImages: gridImages{n: 400, c: 1, h: 1, w: 1}}
		l, _ := NewLoader(ds, LoaderConfig{Batch: 10, Workers: tc.workers, Prefetch: tc.prefetch})
		for b, err := range l.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond) // let workers run ahead
			limit := int64((b.Index + 1 + tc.prefetch) * 10)
			if got := ds.gets.Load(); got > limit {
				t.Fatalf("workers %d prefetch %d: %d examples read while batch %d is in use; at most %d allowed", tc.workers, tc.prefetch, got, b.Index, limit)
			}
			if b.Index == 10 {
				break
			}
		}
	}
}

func TestLoaderReportsFileAndRecord(t *testing.T) {
	dir := t.TempDir()
	images, labels := makeMNIST(t, dir, "train", 100, 4, 4)
	ds, err := OpenIDXImages(images, labels)
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	// The file loses its tail after opening: records 50 and on are gone.
	if err := os.Truncate(images, 16+50*16); err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{0, 2} {
		l, _ := NewLoader(ds, LoaderConfig{Batch: 10, Workers: workers, Prefetch: 2})
		var got error
		batches := 0
		for _, err := range l.All(context.Background()) {
			if err != nil {
				got = err
				break
			}
			batches++
		}
		if batches != 5 {
			t.Errorf("workers %d: %d good batches before the error, want 5", workers, batches)
		}
		wantErr(t, got, images, "record 50", "batch 5", "unexpected EOF")
		var de *Error
		if errors.As(got, &de) && (de.Record != 50 || de.Path != images) {
			t.Errorf("error names record %d of %s", de.Record, de.Path)
		}
	}
}

func TestLoaderConfigErrors(t *testing.T) {
	ds := gridImages{n: 5, c: 1, h: 1, w: 1}
	for _, tc := range []struct {
		cfg  LoaderConfig
		want string
	}{
		{LoaderConfig{Batch: 0}, "batch size 0"},
		{LoaderConfig{Batch: 1, Workers: -1}, "-1 workers"},
		{LoaderConfig{Batch: 1, Prefetch: -2}, "prefetch -2"},
		{LoaderConfig{Batch: 8, DropLast: true}, "no batch of 8"},
		{LoaderConfig{Batch: 1, Ranks: 2}, "needs DropLast"},
		{LoaderConfig{Batch: 1, Rank: 2, Ranks: 2, DropLast: true}, "rank 2 of 2"},
		{LoaderConfig{Batch: 1, Rank: -1, DropLast: true}, "rank -1 of 0"},
		{LoaderConfig{Batch: 2, Ranks: 3, DropLast: true}, "no global batch of 2×3"},
	} {
		_, err := NewLoader(ds, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestLoaderShardsByRank checks that N sharded loaders of batch B deal out,
// batch for batch, exactly the examples of one loader of batch N·B, with no
// example on two ranks, and that positions mean the same global batch.
func TestLoaderShardsByRank(t *testing.T) {
	ds := gridImages{n: 103, c: 1, h: 1, w: 1}
	for _, ranks := range []int{2, 3, 4} {
		const batch = 5
		one, err := NewLoader(ds, LoaderConfig{Batch: batch * ranks, Shuffle: true, Seed: 9, DropLast: true})
		if err != nil {
			t.Fatal(err)
		}
		var want [][]int
		for b, err := range one.All(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, b.Indices)
		}
		got := make([][]int, len(want))
		for r := range ranks {
			l, err := NewLoader(ds, LoaderConfig{Batch: batch, Shuffle: true, Seed: 9, DropLast: true, Rank: r, Ranks: ranks, Workers: r % 2, Prefetch: 1})
			if err != nil {
				t.Fatal(err)
			}
			if l.Len() != len(want) {
				t.Fatalf("%d ranks: rank %d has %d batches per epoch, the unsharded loader %d", ranks, r, l.Len(), len(want))
			}
			if err := l.Seek(Position{0, 1}); err != nil {
				t.Fatal(err)
			}
			k := 1
			for b, err := range l.All(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				if len(b.Indices) != batch {
					t.Fatalf("rank %d batch %d has %d examples", r, k, len(b.Indices))
				}
				got[k] = append(got[k], b.Indices...)
				k++
			}
		}
		for k := 1; k < len(want); k++ {
			if !slices.Equal(got[k], want[k]) {
				t.Errorf("%d ranks, global batch %d: ranks hold %v, one loader of %d holds %v", ranks, k, got[k], batch*ranks, want[k])
			}
		}
	}
}

// mixedDataset returns images of two shapes.
type mixedDataset struct{}

func (mixedDataset) Len() int { return 4 }
func (mixedDataset) Get(i int) (Example, error) {
	if i == 2 {
		return Window{Input: []int32{1}, Target: []int32{2}}, nil
	}
	return Image{Pixels: make([]float32, 3+i), Shape: []int{3 + i}}, nil
}

func TestLoaderMismatchedExamples(t *testing.T) {
	l, _ := NewLoader(mixedDataset{}, LoaderConfig{Batch: 4})
	_, err := l.Load(context.Background(), 0, 0)
	if err == nil || !strings.Contains(err.Error(), "example 1") || !strings.Contains(err.Error(), "shape [4]") {
		t.Errorf("batch of mismatched shapes: %v", err)
	}
}

func TestLoaderConcurrentLoads(t *testing.T) {
	// Load may serve several goroutines (evaluation beside training).
	ds := gridImages{n: 64, c: 1, h: 3, w: 3}
	l, _ := NewLoader(ds, LoaderConfig{Batch: 8, Shuffle: true, Seed: 5})
	want, _ := l.Load(context.Background(), 2, 3)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			got, err := l.Load(context.Background(), 2, 3)
			if err != nil || batchHash(got) != batchHash(want) {
				t.Errorf("concurrent Load differs: %v", err)
			}
		})
	}
	wg.Wait()
}

func TestSplit(t *testing.T) {
	ds := gridImages{n: 1000, c: 1, h: 1, w: 1}
	tr, val, err := Split(ds, 0.1, 9)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != 900 || val.Len() != 100 {
		t.Fatalf("split 900/100 gives %d/%d", tr.Len(), val.Len())
	}
	seen := map[int]bool{}
	for _, s := range []*Subset{tr, val} {
		for i := range s.Len() {
			ex, err := s.Get(i)
			if err != nil {
				t.Fatal(err)
			}
			idx := int(ex.(Image).Pixels[0]) / 1000
			if idx != s.Index(i) || seen[idx] {
				t.Fatalf("subset example %d is dataset example %d (Index says %d), seen before: %v", i, idx, s.Index(i), seen[idx])
			}
			seen[idx] = true
		}
	}
	tr2, _, _ := Split(ds, 0.1, 9)
	if tr2.Index(17) != tr.Index(17) {
		t.Error("same seed, different split")
	}
	if _, _, err := Split(ds, 1, 0); err == nil {
		t.Error("fraction 1: no error")
	}
	if _, err := val.Get(100); err == nil {
		t.Error("index past the subset: no error")
	}
}

func TestGzipCacheIsAtomicAndReused(t *testing.T) {
	src, cache := t.TempDir(), t.TempDir()
	images, labels := makeMNIST(t, src, "t10k", 30, 5, 5)
	for _, p := range []string{images, labels} {
		b, _ := os.ReadFile(p)
		writeFile(t, p+".gz", gzipBytes(b))
		os.Remove(p)
	}
	ds, err := MNIST(src, false, CacheDir(cache))
	if err != nil {
		t.Fatal(err)
	}
	ex, err := ds.Get(29)
	if err != nil {
		t.Fatal(err)
	}
	if im := ex.(Image); im.Label != 9 || im.Pixels[3] != float32(pixel(29, 3))/255 {
		t.Errorf("image 29 from the cache: label %d, pixel 3 = %v", im.Label, im.Pixels[3])
	}
	ds.Close()
	entries, _ := os.ReadDir(cache)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// Sorted: each copy, then its sidecar of size and checksum.
	if len(names) != 4 || !strings.HasPrefix(names[0], "gunzip-") || len(names[0]) != len("gunzip-")+64 ||
		names[1] != names[0]+".sum" || names[3] != names[2]+".sum" {
		t.Fatalf("cache holds %v, want two files named by content hash, each with its .sum", names)
	}
	st0, _ := os.Stat(filepath.Join(cache, names[0]))
	time.Sleep(20 * time.Millisecond)
	t.Setenv(CacheEnv, cache)
	ds, err = MNIST(src, false) // via $MEMFIT_CACHE
	if err != nil {
		t.Fatal(err)
	}
	ds.Close()
	st1, _ := os.Stat(filepath.Join(cache, names[0]))
	if !st1.ModTime().Equal(st0.ModTime()) {
		t.Error("the cached copy was written again")
	}
	entries, _ = os.ReadDir(cache)
	if len(entries) != 4 {
		t.Errorf("cache holds %d files after reuse, want 4", len(entries))
	}
}

// TestLoaderPrefetchBoundedByBytes: a -prefetch far beyond the epoch
// allocates nothing for batches that never come, and PrefetchBytes holds
// the batches read ahead to a byte budget.
func TestLoaderPrefetchBoundedByBytes(t *testing.T) {
	cases := []struct {
		name      string
		prefetch  int
		bytes     int64
		wantAhead int // batches read beyond the one in use, at most
	}{
		{"huge count", 100_000_000, 0, 40},
		{"huge count, bytes", 100_000_000, 3 * 10 * 4 * 4, 3}, // 3 batches of 10 examples of 4 floats + labels
		{"bytes below one batch", 50, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ds := &slowImages{gridImages: gridImages{n: 400, c: 1, h: 2, w: 2}}
			l, err := NewLoader(ds, LoaderConfig{Batch: 10, Workers: 2, Prefetch: c.prefetch, PrefetchBytes: c.bytes})
			if err != nil {
				t.Fatal(err)
			}
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			n := 0
			for b, err := range l.All(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				if b.Index == 0 {
					var after runtime.MemStats
					runtime.ReadMemStats(&after)
					if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<20 {
						t.Fatalf("%d bytes allocated before the first batch", grown)
					}
				}
				time.Sleep(2 * time.Millisecond) // let workers run ahead
				limit := int64((b.Index + 1 + c.wantAhead) * 10)
				if got := ds.gets.Load(); got > limit {
					t.Fatalf("%d examples read while batch %d is in use; at most %d allowed", got, b.Index, limit)
				}
				n++
			}
			if n != 40 {
				t.Errorf("%d batches, want 40", n)
			}
		})
	}
}
