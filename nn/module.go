package nn

import (
	"fmt"
	"strings"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Module is a piece of a model: it maps an input to an output inside a Run
// and owns parameters. Parameters are leaf tensors (F32, category
// memory.Parameter) whose Name is their dotted path in the model
// ("blocks.3.attn.qkv.weight"); a frozen parameter is one that does not
// require grad.
//
// Forward follows the tensor ownership rules: it returns a tensor the
// caller owns, releases every temporary it makes, and never releases its
// input nor writes into it.
type Module interface {
	Forward(r *Run, x *tensor.Tensor) *tensor.Tensor
	Parameters() []*tensor.Tensor
}

// Run is the context of one forward pass: the Scope that records (or not)
// and owns results, whether the model is training (dropout on), the seed of
// this pass's random masks, and whether layers may write in place.
//
// Dropout masks are derived from Seed and the layer's own salt, never from
// a counter advanced by each call, so recomputing a block (activation
// checkpointing) draws exactly the masks of the first pass.
//
// A Run that makes another for a piece of the same pass (a checkpointed
// block, its recompute) copies it whole and changes the Scope (In), so
// that what the pass carries, Segments included, reaches every layer.
type Run struct {
	*tensor.Scope
	Train   bool
	Seed    uint64
	InPlace bool // layers use in-place ops where that is safe
	// Segments, when set, says the rows of the pass's [B, T] batch pack
	// several examples end to end: attention stays inside each example
	// and rotary embeddings take its positions (models set it from the
	// positions their ForwardPacked and TokenLossPacked are given).
	Segments *tensor.Segments
}

// In returns a copy of r that runs in scope s: the same pass (training
// flag, seed, in-place ops, segments) recorded elsewhere.
func (r *Run) In(s *tensor.Scope) *Run {
	c := *r
	c.Scope = s
	return &c
}

// NewRun returns a training run recording gradients, with in-place ops on.
func NewRun(s *tensor.Scope, seed uint64) *Run {
	return &Run{Scope: s, Train: true, Seed: seed, InPlace: true}
}

// Eval returns an inference run: no dropout, and no graph whatever scope it
// is given. Its ops run in a no-grad view of s (s still owns the results,
// and closing s releases them), so each activation is freed as soon as the
// next layer has consumed it, and a loop of eval forwards holds one
// forward's working set. A forward without dropout that must record a graph
// (a gradient check, say) builds its Run itself: &Run{Scope: s}.
func Eval(s *tensor.Scope) *Run {
	return &Run{Scope: s.WithModes(tensor.NoGrad()), Train: false, InPlace: true}
}

// SeedFor mixes the run's seed with a layer's salt.
func (r *Run) SeedFor(salt uint64) uint64 {
	x := r.Seed ^ (salt * 0x9e3779b97f4a7c15)
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	return x ^ x>>29
}

// Salt derives a stable per-layer salt from its path.
func Salt(path string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(path); i++ {
		h ^= uint64(path[i])
		h *= 1099511628211
	}
	return h
}

// Join builds a dotted path, skipping empty parts.
func Join(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// Count is the number of scalar parameters.
func Count(m Module) int {
	n := 0
	for _, p := range m.Parameters() {
		n += p.Len()
	}
	return n
}

// Trainable returns the parameters that require grad.
func Trainable(m Module) []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, p := range m.Parameters() {
		if p.RequiresGrad() {
			out = append(out, p)
		}
	}
	return out
}

// Release frees every parameter of m (and their gradients).
func Release(m Module) {
	for _, p := range m.Parameters() {
		p.Release()
	}
}

// ParameterBytes is the memory of m's parameter values.
func ParameterBytes(m Module) int64 {
	var n int64
	for _, p := range m.Parameters() {
		n += p.Bytes()
	}
	return n
}

// Summary renders one line per parameter (path, shape, count, bytes,
// trainable) and totals.
func Summary(m Module) string {
	var b strings.Builder
	params := m.Parameters()
	width := len("parameter")
	for _, p := range params {
		width = max(width, len(p.Name()))
	}
	fmt.Fprintf(&b, "%-*s  %-16s %12s %12s  %s\n", width, "parameter", "shape", "count", "bytes", "trainable")
	var total, trainable int
	var bytes int64
	for _, p := range params {
		tr := "yes"
		if !p.RequiresGrad() {
			tr = "frozen"
		} else {
			trainable += p.Len()
		}
		total += p.Len()
		bytes += p.Bytes()
		fmt.Fprintf(&b, "%-*s  %-16s %12d %12s  %s\n", width, p.Name(), fmt.Sprint(p.Shape()), p.Len(), memory.FormatBytes(p.Bytes()), tr)
	}
	fmt.Fprintf(&b, "total: %d parameters (%d trainable), %s\n", total, trainable, memory.FormatBytes(bytes))
	return b.String()
}

// Find returns the parameter with the given path, or nil.
func Find(m Module, path string) *tensor.Tensor {
	for _, p := range m.Parameters() {
		if p.Name() == path {
			return p
		}
	}
	return nil
}

// moduleOf is the path of the layer a parameter belongs to: its name less
// the last element ("blocks.2.mlp.fc" for "blocks.2.mlp.fc.weight"), the
// label Scope.Enter gives what the layer's forward makes.
func moduleOf(p *tensor.Tensor) string {
	return parentOf(p.Name())
}

// parentOf drops the last element of a dotted path.
func parentOf(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return path
}
