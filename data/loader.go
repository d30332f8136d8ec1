package data

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
)

// LoaderConfig says how a Loader batches its dataset.
type LoaderConfig struct {
	// Batch is the number of examples per batch (at least 1).
	Batch int
	// DropLast drops the last batch of an epoch when it is smaller than
	// Batch; otherwise it is delivered short.
	DropLast bool
	// Shuffle visits the examples of each epoch in a random order drawn
	// from Seed and the epoch number; otherwise in index order.
	Shuffle bool
	// Seed keys the shuffling and the random streams of Transforms.
	Seed uint64
	// Workers is the number of goroutines that read and assemble batches;
	// 0 reads each batch in the consumer's goroutine when it is asked for.
	Workers int
	// Prefetch is the most batches held ready or in preparation beyond the
	// one in use (ignored when Workers is 0). With Prefetch 0 the next
	// batch is read only once the consumer asks for it; at most
	// min(Workers, Prefetch) batches are read at once.
	Prefetch int
	// PrefetchBytes bounds the prefetched batches by size as well: when
	// it is above 0, Prefetch is lowered (to 1 at least) so that the
	// batches held ahead take at most this many bytes, measured on the
	// epoch's first batch. 0 bounds by count alone. Either way no more
	// batches are held than the epoch has left.
	PrefetchBytes int64
	// Rank and Ranks shard the loader for data-parallel training: with
	// Ranks > 1 each batch is rank Rank's share of a global batch of
	// Batch·Ranks consecutive examples of the epoch's order (the order does
	// not depend on Ranks), the block [Rank·Batch, (Rank+1)·Batch). So N
	// ranks of Batch see, step for step, exactly the examples one loader of
	// Batch·N sees, and no example is on two ranks. Sharding needs
	// DropLast. Ranks 0 and 1 mean unsharded.
	Rank, Ranks int
	// Transforms are applied in order to every example after Get, each
	// given a random stream that depends only on (Seed, epoch, dataset
	// index), so augmentation is reproducible and differs between epochs.
	Transforms []Transform
}

// Position is where a loader stands: the next batch it delivers is batch
// Batch of epoch Epoch. It is what a checkpoint saves to resume a run.
type Position struct {
	Epoch int `json:"epoch"`
	Batch int `json:"batch"`
}

// Loader turns a Dataset into batches. It is used by one goroutine at a
// time; the worker goroutines it starts end before All returns.
type Loader struct {
	ds     Dataset
	cfg    LoaderConfig
	n      int // examples
	nb     int // batches per epoch
	global int // examples per batch over all ranks
	pos    Position
}

// NewLoader returns a loader over ds positioned at the first batch of
// epoch 0. It fails on an invalid configuration or an empty dataset.
func NewLoader(ds Dataset, cfg LoaderConfig) (*Loader, error) {
	switch {
	case ds == nil:
		return nil, errors.New("data: loader: no dataset")
	case cfg.Batch < 1:
		return nil, fmt.Errorf("data: loader: batch size %d: want at least 1", cfg.Batch)
	case cfg.Workers < 0:
		return nil, fmt.Errorf("data: loader: %d workers: want 0 or more", cfg.Workers)
	case cfg.Prefetch < 0:
		return nil, fmt.Errorf("data: loader: prefetch %d: want 0 or more", cfg.Prefetch)
	}
	ranks := max(cfg.Ranks, 1)
	switch {
	case cfg.Ranks < 0 || cfg.Rank < 0 || cfg.Rank >= ranks:
		return nil, fmt.Errorf("data: loader: rank %d of %d: want 0 <= rank < ranks", cfg.Rank, cfg.Ranks)
	case ranks > 1 && !cfg.DropLast:
		return nil, fmt.Errorf("data: loader: sharding over %d ranks needs DropLast (a short last batch cannot be split evenly)", ranks)
	}
	l := &Loader{ds: ds, cfg: cfg, n: ds.Len(), global: cfg.Batch * ranks}
	l.nb = l.n / l.global
	if !cfg.DropLast && l.n%cfg.Batch != 0 {
		l.nb++
	}
	if l.nb == 0 {
		if ranks > 1 {
			return nil, fmt.Errorf("data: loader: dataset of %d examples gives no global batch of %d×%d ranks", l.n, cfg.Batch, ranks)
		}
		return nil, fmt.Errorf("data: loader: dataset of %d examples gives no batch of %d (drop-last %v)", l.n, cfg.Batch, cfg.DropLast)
	}
	return l, nil
}

// Len returns the number of batches in an epoch.
func (l *Loader) Len() int { return l.nb }

// Dataset returns the dataset the loader reads.
func (l *Loader) Dataset() Dataset { return l.ds }

// Position returns the position of the next batch to be delivered. Inside
// the body of a range over All it is already past the batch in hand, so a
// checkpoint written after a step resumes with the step's successor.
func (l *Loader) Position() Position { return l.pos }

// Seek moves the loader to p, a position returned by Position (possibly by
// another loader over the same dataset and configuration).
func (l *Loader) Seek(p Position) error {
	if p.Epoch < 0 || p.Batch < 0 || p.Batch > l.nb {
		return fmt.Errorf("data: loader: position epoch %d batch %d: want epoch >= 0 and batch in [0, %d]", p.Epoch, p.Batch, l.nb)
	}
	if p.Batch == l.nb {
		p = Position{p.Epoch + 1, 0}
	}
	l.pos = p
	return nil
}

// index returns the dataset index of the example at position i of an epoch.
func (l *Loader) index(perm *permutation, i int) int {
	if perm == nil {
		return i
	}
	return perm.at(i)
}

func (l *Loader) perm(epoch int) *permutation {
	if !l.cfg.Shuffle {
		return nil
	}
	p := newPermutation(l.n, mix(l.cfg.Seed, uint64(epoch)))
	return &p
}

// Load reads batch k of an epoch in the calling goroutine, independently
// of the loader's position.
func (l *Loader) Load(ctx context.Context, epoch, k int) (*Batch, error) {
	if k < 0 || k >= l.nb || epoch < 0 {
		return nil, fmt.Errorf("data: loader: batch %d of epoch %d: want epoch >= 0 and batch in [0, %d)", k, epoch, l.nb)
	}
	return l.load(ctx, l.perm(epoch), epoch, k)
}

func (l *Loader) load(ctx context.Context, perm *permutation, epoch, k int) (*Batch, error) {
	start := k*l.global + l.cfg.Rank*l.cfg.Batch
	n := min(l.cfg.Batch, l.n-start)
	b := newBatch(epoch, k, n)
	for j := range n {
		if j%16 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		idx := l.index(perm, start+j)
		b.Indices[j] = idx
		ex, err := l.ds.Get(idx)
		if err == nil && len(l.cfg.Transforms) > 0 {
			rng := exampleRand(l.cfg.Seed, epoch, idx)
			for _, t := range l.cfg.Transforms {
				if ex, err = t.Apply(ex, rng); err != nil {
					break
				}
			}
		}
		if err == nil {
			err = b.put(j, n, ex)
		}
		if err != nil {
			return nil, fmt.Errorf("data: epoch %d, batch %d, example %d: %w", epoch, k, idx, err)
		}
	}
	return b, nil
}

// advance records that batch k of the current epoch has been delivered.
func (l *Loader) advance(k int) {
	if k+1 == l.nb {
		l.pos = Position{l.pos.Epoch + 1, 0}
	} else {
		l.pos.Batch = k + 1
	}
}

type result struct {
	b   *Batch
	err error
}

// All yields the remaining batches of the current epoch in order, from
// Position to the epoch's end, after which the loader stands at the start
// of the next epoch; range over All once per epoch. Iteration stops at the
// first error, which is yielded with a nil batch: a record that could not
// be read (its file and index named), or the context's error once it is
// cancelled. Breaking out of the loop stops the workers; the batch in hand
// counts as delivered.
func (l *Loader) All(ctx context.Context) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		epoch, start := l.pos.Epoch, l.pos.Batch
		perm := l.perm(epoch)
		if l.cfg.Workers == 0 {
			for k := start; k < l.nb; k++ {
				b, err := l.load(ctx, perm, epoch, k)
				if err != nil {
					yield(nil, err)
					return
				}
				l.advance(k)
				if !yield(b, nil) {
					return
				}
			}
			return
		}

		// The ring has a channel per batch of depth: a depth beyond what
		// the epoch has left would allocate for batches that never come
		// (-prefetch 100000000 took gigabytes before step 1).
		depth := max(min(l.cfg.Prefetch, l.nb-start), 1)
		var first *result
		if l.cfg.PrefetchBytes > 0 && depth > 1 && start < l.nb {
			// Measure one batch, read here, to turn the byte bound
			// into a count; it is delivered first.
			b, err := l.load(ctx, perm, epoch, start)
			first = &result{b, err}
			if err == nil && b.Bytes() > 0 {
				depth = int(max(min(l.cfg.PrefetchBytes/b.Bytes(), int64(depth)), 1))
			}
		}

		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()

		// A batch takes a slot before a worker starts it and gives it
		// back when the consumer receives it (with Prefetch 0: when the
		// consumer asks for the next one), so at most depth batches exist
		// besides the one in use, and batch k's result can only land in
		// ring[k%depth] once batch k-depth has left it.
		slots := make(chan struct{}, depth)
		ring := make([]chan result, depth)
		for i := range ring {
			ring[i] = make(chan result, 1)
		}
		tickets := make(chan int)
		from := start
		if first != nil {
			from++ // batch start is in hand
		}
		wg.Go(func() {
			defer close(tickets)
			for k := from; k < l.nb; k++ {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				select {
				case tickets <- k:
				case <-ctx.Done():
					return
				}
			}
		})
		for range l.cfg.Workers {
			wg.Go(func() {
				for k := range tickets {
					b, err := l.load(ctx, perm, epoch, k)
					ring[k%depth] <- result{b, err}
				}
			})
		}

		for k := start; k < l.nb; k++ {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			var r result
			if first != nil && k == start {
				r = *first
			} else {
				select {
				case r = <-ring[k%depth]:
				case <-ctx.Done():
					yield(nil, ctx.Err())
					return
				}
				if l.cfg.Prefetch > 0 {
					<-slots
				}
			}
			if r.err != nil {
				yield(nil, r.err)
				return
			}
			l.advance(k)
			if !yield(r.b, nil) {
				return
			}
			if l.cfg.Prefetch == 0 {
				<-slots
			}
		}
	}
}
