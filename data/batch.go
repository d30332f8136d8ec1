package data

import (
	"fmt"
	"math"
	"slices"
)

// Batch is a host-side batch: the examples of one loader step stacked
// along a new first dimension.
//
// For Image examples, Inputs holds the pixels with InputShape [n, ...image
// shape] and Targets the labels with TargetShape [n]. For Window examples,
// Tokens holds the inputs with InputShape [n, T] and Targets the next
// tokens with TargetShape [n, T]. Exactly one of Inputs and Tokens is set.
type Batch struct {
	Epoch int // epoch the batch belongs to
	Index int // position of the batch within its epoch

	Indices []int // dataset index of each example

	Inputs      []float32
	Tokens      []int32
	InputShape  []int
	Targets     []int32
	TargetShape []int
}

// Len returns the number of examples in the batch.
func (b *Batch) Len() int { return len(b.Indices) }

// Bytes returns the size of the batch's inputs and targets in bytes (what
// ToDevice allocates).
func (b *Batch) Bytes() int64 {
	return 4 * int64(len(b.Inputs)+len(b.Tokens)+len(b.Targets))
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// put stores ex as example j of a batch of n examples; the first example
// fixes the batch's kind and shapes.
func (b *Batch) put(j, n int, ex Example) error {
	switch e := ex.(type) {
	case Image:
		size := numel(e.Shape)
		if len(e.Shape) == 0 || size != len(e.Pixels) {
			return fmt.Errorf("image of shape %v holds %d values", e.Shape, len(e.Pixels))
		}
		if e.Label < math.MinInt32 || e.Label > math.MaxInt32 {
			return fmt.Errorf("label %d does not fit in int32", e.Label)
		}
		if j == 0 {
			b.Inputs = make([]float32, n*size)
			b.InputShape = append([]int{n}, e.Shape...)
			b.Targets = make([]int32, n)
			b.TargetShape = []int{n}
		} else if b.Inputs == nil || !slices.Equal(b.InputShape[1:], e.Shape) {
			return fmt.Errorf("image of shape %v in a batch of %s", e.Shape, b.kind())
		}
		copy(b.Inputs[j*size:], e.Pixels)
		b.Targets[j] = int32(e.Label)
	case Window:
		t := len(e.Input)
		if t == 0 || len(e.Target) != t {
			return fmt.Errorf("window of %d input and %d target tokens", len(e.Input), len(e.Target))
		}
		if j == 0 {
			b.Tokens = make([]int32, n*t)
			b.Targets = make([]int32, n*t)
			b.InputShape = []int{n, t}
			b.TargetShape = []int{n, t}
		} else if b.Tokens == nil || b.InputShape[1] != t {
			return fmt.Errorf("window of %d tokens in a batch of %s", t, b.kind())
		}
		copy(b.Tokens[j*t:], e.Input)
		copy(b.Targets[j*t:], e.Target)
	case nil:
		return fmt.Errorf("dataset returned no example")
	default:
		return fmt.Errorf("unsupported example type %T", ex)
	}
	return nil
}

func (b *Batch) kind() string {
	if b.Tokens != nil {
		return fmt.Sprintf("windows of %d tokens", b.InputShape[1])
	}
	return fmt.Sprintf("images of shape %v", b.InputShape[1:])
}
