package dist

import (
	"fmt"
	"math/bits"

	"github.com/memfit/memfit/data"
)

// Sampler deals the examples of a dataset of N examples out to Size ranks
// for one epoch at a time: a permutation of [0, N) keyed by (Seed, epoch)
// — the same on every rank — of which rank r takes positions r, r+Size,
// r+2·Size, … Every rank gets the same number of examples, Len:
//
//   - DropLast: the last N mod Size positions of the permutation are
//     dropped (a different few each epoch): Len = ⌊N/Size⌋, and no example
//     is seen by two ranks in an epoch.
//   - otherwise the permutation is padded by repeating its first positions:
//     Len = ⌈N/Size⌉, every example is seen, and up to Size-1 of them
//     twice (on different ranks) in that epoch.
//
// The permutation is a keyed bijection computed per index (a Feistel
// network), so a sampler holds no index list however large the dataset.
// Shuffle false keeps the order 0 … N-1 before dealing.
type Sampler struct {
	N, Rank, Size int
	Seed          uint64
	Shuffle       bool
	DropLast      bool
}

// NewSampler checks its arguments and returns a shuffling sampler.
func NewSampler(n, rank, size int, seed uint64, dropLast bool) (*Sampler, error) {
	s := &Sampler{N: n, Rank: rank, Size: size, Seed: seed, Shuffle: true, DropLast: dropLast}
	return s, s.validate()
}

func (s *Sampler) validate() error {
	switch {
	case s.Size < 1:
		return fmt.Errorf("dist: sampler: %d ranks; want at least 1", s.Size)
	case s.Rank < 0 || s.Rank >= s.Size:
		return fmt.Errorf("dist: sampler: rank %d outside [0, %d)", s.Rank, s.Size)
	case s.N < 0:
		return fmt.Errorf("dist: sampler: %d examples", s.N)
	case s.DropLast && s.N < s.Size:
		return fmt.Errorf("dist: sampler: %d examples cannot be dealt to %d ranks with DropLast", s.N, s.Size)
	}
	return nil
}

// Len is the number of examples each rank gets per epoch.
func (s *Sampler) Len() int {
	if s.Size < 1 {
		return 0
	}
	if s.DropLast {
		return s.N / s.Size
	}
	return (s.N + s.Size - 1) / s.Size
}

// Index returns the dataset index of this rank's i-th example in epoch.
func (s *Sampler) Index(epoch, i int) int {
	pos := i*s.Size + s.Rank
	if pos >= s.N {
		pos -= s.N // padding: wrap to the start of the permutation
	}
	if !s.Shuffle {
		return pos
	}
	return newFeistel(s.N, mix(s.Seed, uint64(epoch))).at(pos)
}

// Indices returns this rank's dataset indices for epoch, in order.
func (s *Sampler) Indices(epoch int) []int {
	out := make([]int, s.Len())
	p := newFeistel(s.N, mix(s.Seed, uint64(epoch)))
	for i := range out {
		pos := i*s.Size + s.Rank
		if pos >= s.N {
			pos -= s.N
		}
		if s.Shuffle {
			pos = p.at(pos)
		}
		out[i] = pos
	}
	return out
}

// Shard returns the dataset of this rank's examples of ds in epoch (Len
// of them, in the sampler's order): give it to a data.Loader (its own
// shuffling is then optional) and make a new one each epoch.
func Shard(ds data.Dataset, s *Sampler, epoch int) (data.Dataset, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if ds.Len() != s.N {
		return nil, fmt.Errorf("dist: shard: the dataset has %d examples, the sampler %d", ds.Len(), s.N)
	}
	sh := &shard{ds: ds, s: *s, epoch: epoch}
	if s.Shuffle {
		sh.perm = newFeistel(s.N, mix(s.Seed, uint64(epoch)))
	}
	return sh, nil
}

type shard struct {
	ds    data.Dataset
	s     Sampler
	epoch int
	perm  feistel
}

func (sh *shard) Len() int { return sh.s.Len() }

func (sh *shard) Get(i int) (data.Example, error) {
	if i < 0 || i >= sh.Len() {
		return nil, fmt.Errorf("dist: shard: index %d out of range [0, %d)", i, sh.Len())
	}
	pos := i*sh.s.Size + sh.s.Rank
	if pos >= sh.s.N {
		pos -= sh.s.N
	}
	if sh.s.Shuffle {
		pos = sh.perm.at(pos)
	}
	return sh.ds.Get(pos)
}

// mix hashes two words into one (splitmix64's finaliser).
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	return z ^ z>>31
}

// feistel is a keyed bijection of [0, n): a balanced Feistel network on
// the smallest even bit width covering n, cycle-walked back into range.
type feistel struct {
	n    uint64
	half uint
	mask uint64
	keys [4]uint64
}

func newFeistel(n int, key uint64) feistel {
	f := feistel{n: uint64(max(n, 0))}
	w := uint(0)
	if f.n > 1 {
		w = uint(bits.Len64(f.n - 1))
	}
	f.half = max((w+1)/2, 1)
	f.mask = 1<<f.half - 1
	for i := range f.keys {
		f.keys[i] = mix(key, uint64(i+1))
	}
	return f
}

func (f feistel) at(i int) int {
	x := uint64(i)
	for {
		l, r := x>>f.half, x&f.mask
		for _, k := range f.keys {
			l, r = r, l^(mix(r, k)&f.mask)
		}
		x = l<<f.half | r
		if x < f.n {
			return int(x)
		}
	}
}
