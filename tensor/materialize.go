package tensor

import "slices"

// Materializing deferred tensors one at a time: a model built of
// Deferred parameters (nn.Builder.Defer, an import's DeferFrom) can be
// given its memory a tensor at a time, in place of Flatten's blocks, by
// a builder that must see each tensor before the next exists (one that
// quantizes frozen weights as it loads them: the model is never whole
// in a float dtype). A materialized tensor's storage is its own and not
// evictable, as if it had never been deferred.

// Materialize allocates a deferred t's storage (under the category it
// was made with) and draws its values with its fill, as Flatten would
// draw it; its end runs. A tensor that is not deferred is an error, and
// so is a failing fill (t stays deferred, with its fill).
func (t *Tensor) Materialize() error {
	if t == nil || t.released {
		return errorf("Materialize", "nil or released tensor")
	}
	fill := t.st.deferred
	switch {
	case fill == nil:
		return errorf("Materialize", "%s is not deferred", t.describe())
	case t.st.refs.Load() != 1:
		return errorf("Materialize", "%s shares its storage with %d other handles", t.describe(), t.st.refs.Load()-1)
	}
	n, err := alloc(t.st.dev, t.dtype, t.shape, t.st.cat)
	if err != nil {
		return err
	}
	if err := fill(n.view()); err != nil {
		n.Release()
		return errorf("Materialize", "drawing %s: %v", t.describe(), err)
	}
	t.adopt(n) // n takes the deferred storage: its end runs
	return nil
}

// MaterializeFrom gives a deferred t the storage of src instead of
// drawing it: a new contiguous leaf of t's shape, on t's device and
// counted under t's category, that no other handle, view or op holds.
// t takes src's dtype (a weight quantized from its host values,
// QuantizeFloat32, or read as a checkpoint stores it, FromNF4), its
// fill is never called and its end runs; src's handle is released. A
// quantized src needs a t that does not require grad.
func (t *Tensor) MaterializeFrom(src *Tensor) error {
	switch {
	case t == nil || t.released:
		return errorf("MaterializeFrom", "nil or released tensor")
	case t.st.deferred == nil:
		return errorf("MaterializeFrom", "%s is not deferred", t.describe())
	case t.st.refs.Load() != 1:
		return errorf("MaterializeFrom", "%s shares its storage with %d other handles", t.describe(), t.st.refs.Load()-1)
	case src == nil || src.released:
		return errorf("MaterializeFrom", "%s: the source is nil or released", t.describe())
	case !slices.Equal(src.shape, t.shape):
		return errorf("MaterializeFrom", "%s: the source is %v", t.describe(), src.shape)
	case src.st.dev != t.st.dev:
		return errorf("MaterializeFrom", "%s: the source is on another device", t.describe())
	case src.st.deferred != nil || src.st.evictable:
		return errorf("MaterializeFrom", "%s: the source %s is deferred or flattened", t.describe(), src.describe())
	case src.node != nil || src.grad != nil || src.st.refs.Load() != 1 || !src.IsContiguous():
		return errorf("MaterializeFrom", "%s: the source %s is not a new contiguous leaf held by one handle", t.describe(), src.describe())
	case src.Category() != t.st.cat:
		return errorf("MaterializeFrom", "%s: the source is counted as %v, not %v", t.describe(), src.Category(), t.st.cat)
	case src.dtype.IsQuantized() && t.requiresGrad:
		return errorf("MaterializeFrom", "%s requires grad: only a frozen weight is quantized (to %v)", t.describe(), src.dtype)
	}
	t.adopt(src) // src takes the deferred storage: its end runs
	return nil
}
