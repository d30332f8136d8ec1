package data

import (
	"fmt"
	"math"
)

// Dataset is an indexed collection of examples read on demand.
//
// Get returns example i for 0 <= i < Len(); the slices of the returned
// example belong to the caller (transforms may change them in place). Get
// may be called from several goroutines at once.
type Dataset interface {
	Len() int
	Get(i int) (Example, error)
}

// Example is one record of a Dataset: an Image or a Window.
type Example interface {
	example()
}

// Image is a float tensor with a class label. Pixels holds the values in
// row-major order of Shape, channels first ([C, H, W]); a feature vector is
// an Image of Shape [D].
type Image struct {
	Pixels []float32
	Shape  []int
	Label  int
}

// Window is a run of tokens for next-token prediction: Target[t] is the
// token that follows Input[t]. Both have the window's context length.
type Window struct {
	Input  []int32
	Target []int32
}

func (Image) example()  {}
func (Window) example() {}

// Subset is a view of some examples of another dataset.
type Subset struct {
	ds     Dataset
	perm   permutation
	off, n int
}

// Len returns the number of examples in the subset.
func (s *Subset) Len() int { return s.n }

// Get returns example i of the subset.
func (s *Subset) Get(i int) (Example, error) {
	if i < 0 || i >= s.n {
		return nil, fmt.Errorf("data: subset index %d out of range [0, %d)", i, s.n)
	}
	return s.ds.Get(s.perm.at(s.off + i))
}

// Index returns the index in the underlying dataset of example i.
func (s *Subset) Index(i int) int { return s.perm.at(s.off + i) }

// Split divides ds into a training part and a validation part of
// round(valFraction·Len) examples, chosen by a permutation seeded with
// seed. The parts are disjoint views; nothing is copied, and the split
// costs constant memory whatever the dataset's size.
func Split(ds Dataset, valFraction float64, seed uint64) (train, val *Subset, err error) {
	if !(valFraction >= 0 && valFraction < 1) {
		return nil, nil, fmt.Errorf("data: validation fraction %v: want a value in [0, 1)", valFraction)
	}
	n := ds.Len()
	nv := int(math.Round(valFraction * float64(n)))
	p := newPermutation(n, mix(seed, 0x5b117))
	return &Subset{ds: ds, perm: p, off: 0, n: n - nv}, &Subset{ds: ds, perm: p, off: n - nv, n: nv}, nil
}
