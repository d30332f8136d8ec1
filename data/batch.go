package data

import (
	"fmt"
	"math"
	"slices"
	"sync"
)

// Batch is a host-side batch: the examples of one loader step stacked
// along a new first dimension.
//
// For Image examples, Inputs holds the pixels with InputShape [n, ...image
// shape] and Targets the labels with TargetShape [n]. For Window examples,
// Tokens holds the inputs with InputShape [n, T] and Targets the next
// tokens with TargetShape [n, T]. Exactly one of Inputs and Tokens is set.
//
// For Sequence examples (fine-tuning data), Tokens and Targets are as for
// Windows with T the longest example's length: shorter rows are padded
// with PadToken and IgnoreIndex targets (Padding counts those positions),
// and Positions holds each token's position within its example when the
// examples are packed.
type Batch struct {
	Epoch int // epoch the batch belongs to
	Index int // position of the batch within its epoch

	Indices []int // dataset index of each example

	Inputs      []float32
	Tokens      []int32
	InputShape  []int
	Targets     []int32
	TargetShape []int

	// Positions, of InputShape, is each token's position within its
	// example for packed Sequences: 0 where an example starts, so a model
	// restarts its positions there and keeps attention inside the
	// example. Nil means 0, 1, ..., T-1 in every row.
	Positions []int32
	// Padding is the number of padded positions in Tokens.
	Padding int

	seq bool // the batch holds Sequences

	// spare holds a recycled batch's arrays until put fills them again.
	spare batchArrays
}

type batchArrays struct {
	indices           []int
	inputs            []float32
	tokens, targets   []int32
	inShape, tgtShape []int
	positions         []int32
}

// recycled keeps a few batches' arrays for the loader's next batches, so
// that a training loop that recycles its batches makes no new host arrays
// per step. A handful covers the batches in flight (prefetch and workers,
// training and validation); more are left to the garbage collector.
var recycled struct {
	mu   sync.Mutex
	free []*Batch
}

const maxRecycled = 16

// Recycle gives b's arrays back for a later batch; b must not be used
// afterwards (its fields are cleared). Calling it is optional: a batch
// that is not recycled is collected like any other value.
func (b *Batch) Recycle() {
	if b == nil {
		return
	}
	*b = Batch{spare: batchArrays{
		indices: b.Indices, inputs: b.Inputs, tokens: b.Tokens, targets: b.Targets,
		inShape: b.InputShape, tgtShape: b.TargetShape, positions: b.Positions,
	}}
	recycled.mu.Lock()
	defer recycled.mu.Unlock()
	if len(recycled.free) < maxRecycled {
		recycled.free = append(recycled.free, b)
	}
}

// newBatch returns an empty batch of n examples, on recycled arrays when
// there are some.
func newBatch(epoch, index, n int) *Batch {
	recycled.mu.Lock()
	var b *Batch
	if k := len(recycled.free); k > 0 {
		b = recycled.free[k-1]
		recycled.free[k-1] = nil
		recycled.free = recycled.free[:k-1]
	}
	recycled.mu.Unlock()
	if b == nil {
		b = &Batch{}
	}
	b.Epoch, b.Index = epoch, index
	b.Indices = reuse(b.spare.indices, n)
	return b
}

// reuse returns n elements of buf (zeroed), reallocating only when it is
// too short.
func reuse[E any](buf []E, n int) []E {
	if cap(buf) < n {
		return make([]E, n)
	}
	buf = buf[:n]
	clear(buf)
	return buf
}

// Len returns the number of examples in the batch.
func (b *Batch) Len() int { return len(b.Indices) }

// Bytes returns the size of the batch's inputs, targets and positions in
// bytes (what ToDevice allocates, with the positions when they are set).
func (b *Batch) Bytes() int64 {
	return 4 * int64(len(b.Inputs)+len(b.Tokens)+len(b.Targets)+len(b.Positions))
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
			b.Inputs = reuse(b.spare.inputs, n*size)
			b.InputShape = append(append(b.spare.inShape[:0], n), e.Shape...)
			b.Targets = reuse(b.spare.targets, n)
			b.TargetShape = append(b.spare.tgtShape[:0], n)
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
			b.Tokens = reuse(b.spare.tokens, n*t)
			b.Targets = reuse(b.spare.targets, n*t)
			b.InputShape = append(b.spare.inShape[:0], n, t)
			b.TargetShape = append(b.spare.tgtShape[:0], n, t)
		} else if b.Tokens == nil || b.seq || b.InputShape[1] != t {
			return fmt.Errorf("window of %d tokens in a batch of %s", t, b.kind())
		}
		copy(b.Tokens[j*t:], e.Input)
		copy(b.Targets[j*t:], e.Target)
	case Sequence:
		return b.putSequence(j, n, e)
	case nil:
		return fmt.Errorf("dataset returned no example")
	default:
		return fmt.Errorf("unsupported example type %T", ex)
	}
	return nil
}

func (b *Batch) kind() string {
	if b.seq {
		return fmt.Sprintf("sequences of up to %d tokens", b.InputShape[1])
	}
	if b.Tokens != nil {
		return fmt.Sprintf("windows of %d tokens", b.InputShape[1])
	}
	return fmt.Sprintf("images of shape %v", b.InputShape[1:])
}
