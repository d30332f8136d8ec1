package nn

import "github.com/memfit/memfit/tensor"

// EmbeddingConfig configures an Embedding.
type EmbeddingConfig struct {
	Num, Dim int // rows (vocabulary size) and width
	// Init defaults to Normal(0, 1).
	Init Init
}

// Embedding maps integer indices to rows of a table. Parameter:
// <path>.weight [Num, Dim].
type Embedding struct {
	Weight *tensor.Tensor
}

// NewEmbedding makes an Embedding whose table lives at <path>.weight.
func NewEmbedding(b *Builder, path string, c EmbeddingConfig) (*Embedding, error) {
	if err := positive("embedding", path, "Num", c.Num); err != nil {
		return nil, err
	}
	if err := positive("embedding", path, "Dim", c.Dim); err != nil {
		return nil, err
	}
	w, err := b.Param(Join(path, "weight"), []int{c.Num, c.Dim}, c.Init.Or(Normal(0, 1)))
	if err != nil {
		return nil, err
	}
	return &Embedding{Weight: w}, nil
}

// Forward looks up idx (I32 or I64, any shape) and returns idx.Shape()+[Dim].
// An index outside the table panics with *device.IndexError, which
// tensor.Catch returns as an error.
func (l *Embedding) Forward(r *Run, idx *tensor.Tensor) *tensor.Tensor {
	defer r.Enter(moduleOf(l.Weight))()
	return r.Embedding(l.Weight, idx)
}

// Parameters is the table.
func (l *Embedding) Parameters() []*tensor.Tensor { return params(l.Weight) }

func (l *Embedding) freshOutput() {}
