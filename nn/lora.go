package nn

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// LoRAConfig configures a low-rank adapter of a Linear layer.
type LoRAConfig struct {
	Rank int
	// Alpha sets the adapter's scale, Alpha/Rank (0: Alpha = Rank, a scale
	// of 1), so that changing the rank does not change the size of the
	// update for a given learning rate.
	Alpha float64
	// Dropout is applied, while training, to the adapter's input (the
	// base layer sees x unchanged).
	Dropout float64
	// Seed draws A (each adapter from its own path, as Builder does).
	Seed uint64
	// DType of A and B: F32 when unset.
	DType tensor.DType
}

// LoRA is a low-rank adapter of a Linear layer (Hu et al., "LoRA: Low-Rank
// Adaptation of Large Language Models", 2021): the layer computes
//
//	y = x·Wᵀ + b + Scale·(dropout(x)·Aᵀ)·Bᵀ
//
// with A [Rank, In] and B [Out, Rank] trained while W stays frozen. B
// starts at zero, so an adapted model computes exactly what its base does
// until the first step; A starts uniform in ±1/√In. Parameters:
// <path>.lora_a and <path>.lora_b beside the layer's weight and bias.
//
// The adapter's memory is its two matrices (and, in training, the
// [..., Rank] product it saves): the [..., In] input is the one the base
// product saves already.
type LoRA struct {
	A, B    *tensor.Tensor
	Rank    int
	Scale   float64
	Dropout float64

	merged bool
	salt   uint64
}

// AttachLoRA gives l a new adapter (an error if it has one). The layer's
// weight is not changed; freezing it is the caller's choice.
func (l *Linear) AttachLoRA(c LoRAConfig) error {
	path := moduleOf(l.Weight)
	if l.Adapter != nil {
		return fmt.Errorf("nn: linear %q already has a LoRA adapter", path)
	}
	if err := positive("lora", path, "Rank", c.Rank); err != nil {
		return err
	}
	if c.Alpha < 0 || math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0) {
		return configError("lora", path, "Alpha", "is %v, want a finite value >= 0", c.Alpha)
	}
	if c.Dropout < 0 || c.Dropout >= 1 {
		return configError("lora", path, "Dropout", "is %v, want 0 <= Dropout < 1", c.Dropout)
	}
	out, in := l.Weight.Shape()[0], l.Weight.Shape()[1]
	b := &Builder{Dev: l.Weight.UsedOn(), Seed: c.Seed, DType: c.DType}
	bound := 1 / math.Sqrt(float64(in))
	a, err := b.Param(Join(path, "lora_a"), []int{c.Rank, in}, Uniform(-bound, bound))
	if err != nil {
		return err
	}
	bm, err := b.Param(Join(path, "lora_b"), []int{out, c.Rank}, Zeros())
	if err != nil {
		b.Abort()
		return err
	}
	alpha := c.Alpha
	if alpha == 0 {
		alpha = float64(c.Rank)
	}
	l.Adapter = &LoRA{A: a, B: bm, Rank: c.Rank, Scale: alpha / float64(c.Rank), Dropout: c.Dropout, salt: Salt(Join(path, "lora_dropout"))}
	return nil
}

// Merged says whether the adapter's update is folded into the weight
// (Forward then skips the adapter).
func (a *LoRA) Merged() bool { return a.merged }

// forward adds the adapter's term to y, the base layer's output for x, and
// returns the sum (y itself when the run allows in-place writes: y is a new
// tensor nobody saved).
func (a *LoRA) forward(r *Run, x, y *tensor.Tensor) *tensor.Tensor {
	in := x
	if r.Train && a.Dropout > 0 {
		in = r.Dropout(x, a.Dropout, r.SeedFor(a.salt))
	}
	h := r.Linear(in, a.A, nil) // [..., Rank]
	if in != x {
		in.Release()
	}
	if a.Scale != 1 {
		// Scaling the [..., Rank] product, which no op saved, costs
		// Rank/Out of scaling the update.
		var s *tensor.Tensor
		if r.InPlace {
			s = r.MulScalarInPlace(h, a.Scale)
		} else {
			s = r.MulScalar(h, a.Scale)
		}
		h.Release()
		h = s
	}
	d := r.Linear(h, a.B, nil) // [..., Out]
	h.Release()
	defer d.Release()
	defer y.Release()
	if r.InPlace && d.DType() == y.DType() {
		return r.AddInPlace(y, d)
	}
	return r.Add(y, d)
}

// withDelta returns W + sign·Scale·B·A as a new F32 tensor on the layer's
// device (memory.Temporary; the caller releases it), computed with the
// device's own product: one [Out, In] temporary, never the model twice.
func (l *Linear) withDelta(sign float64) (*tensor.Tensor, error) {
	a := l.Adapter
	var out *tensor.Tensor
	err := tensor.Step(func(s *tensor.Scope) error {
		f32 := func(t *tensor.Tensor) *tensor.Tensor {
			if t.DType() == tensor.F32 {
				return t
			}
			return s.Cast(t, tensor.F32)
		}
		ba := s.ScaledMatMul(f32(a.B), f32(a.A), sign*a.Scale) // [Out, In]
		out = s.Keep(s.Add(f32(l.Weight), ba))
		return nil
	}, tensor.NoGrad(), tensor.Category(memory.Temporary))
	return out, err
}

// MergedWeight returns W + Scale·B·A, the weight of the bare layer that
// computes what the adapted one does (W itself when the adapter is merged
// or absent), as F32 values in W's layout. It changes nothing; it needs
// room on the device for one [Out, In] F32 temporary (and the read's
// transient), or returns the out-of-memory error.
func (l *Linear) MergedWeight() ([]float32, error) {
	var vals []float32
	err := tensor.Catch(func() error {
		if l.Adapter == nil || l.Adapter.merged {
			vals = l.Weight.Float32s()
			return nil
		}
		w, err := l.withDelta(1)
		if err != nil {
			return err
		}
		defer w.Release()
		vals = w.Float32s()
		return nil
	})
	return vals, err
}

// MergeLoRA folds the adapter into the weight, W += Scale·B·A, so that
// inference runs one product per layer; Forward then skips the adapter.
// The sum is rounded to the weight's dtype (a 16-bit weight keeps 16
// bits). Training a merged layer would train nothing: unmerge first.
func (l *Linear) MergeLoRA() error {
	a := l.Adapter
	if a == nil || a.merged {
		return nil
	}
	if l.Weight.DType().IsQuantized() {
		return fmt.Errorf("nn: merging the adapter of %q: the weight is %v, which holds no update (MergedWeight and Export dequantize it)", moduleOf(l.Weight), l.Weight.DType())
	}
	w, err := l.MergedWeight()
	if err == nil {
		err = l.Weight.SetFloat32s(w)
	}
	if err != nil {
		return fmt.Errorf("nn: merging the adapter of %q: %w", moduleOf(l.Weight), err)
	}
	a.merged = true
	return nil
}

// UnmergeLoRA undoes MergeLoRA, W -= Scale·B·A. The weight comes back
// within rounding of the original, not bitwise: keep the unmerged model
// (or its checkpoint) when the exact base matters.
func (l *Linear) UnmergeLoRA() error {
	a := l.Adapter
	if a == nil || !a.merged {
		return nil
	}
	err := tensor.Catch(func() error {
		w, err := l.withDelta(-1)
		if err != nil {
			return err
		}
		defer w.Release()
		return l.Weight.SetFloat32s(w.Float32s())
	})
	if err != nil {
		return fmt.Errorf("nn: unmerging the adapter of %q: %w", moduleOf(l.Weight), err)
	}
	a.merged = false
	return nil
}

// Exported is one parameter of a model as a checkpoint of the bare model
// holds it: adapters merged into their weights.
type Exported struct {
	Name  string
	Shape []int
	// Float32s reads the values (a copy on the host), one tensor at a
	// time, so that an export never holds a second copy of the model;
	// the error is the device's (out of memory for the read).
	Float32s func() ([]float32, error)
}

// Export lists m's parameters in the order of Parameters, without the
// adapters' A and B and with each adapted weight merged (MergedWeight):
// what a model without adapters that computes the same function holds.
func Export(m Module) []Exported {
	adapted := map[*tensor.Tensor]*Linear{}
	skip := map[*tensor.Tensor]bool{}
	Walk(m, func(x Module) error {
		if l, ok := x.(*Linear); ok && l.Adapter != nil {
			adapted[l.Weight] = l
			skip[l.Adapter.A], skip[l.Adapter.B] = true, true
		}
		return nil
	})
	var out []Exported
	for _, p := range m.Parameters() {
		if skip[p] {
			continue
		}
		e := Exported{Name: p.Name(), Shape: append([]int(nil), p.Shape()...), Float32s: func() ([]float32, error) {
			var v []float32
			err := tensor.Catch(func() error { v = p.Float32s(); return nil })
			return v, err
		}}
		if l := adapted[p]; l != nil {
			e.Float32s = l.MergedWeight
		}
		out = append(out, e)
	}
	return out
}
