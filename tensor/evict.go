package tensor

import (
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Flattened, evictable storage: how a parameter sharded across ranks
// (dist's ZeRO stage 3) exists whole only while it is used. The
// parameters of a block are moved into one storage (Flatten) and stay
// the same tensors — names, shapes, requires-grad, hooks, and every
// reference a model or an optimizer holds. Between uses the storage is
// evicted: its memory returns to the allocator while every handle on it
// (the parameters, and the tensors autograd saved for backward) stays
// valid; Rematerialize allocates it again and fills it. Whoever reads an
// evicted storage gets a *Error naming the tensor, never stale memory.

// Flatten moves params into one new storage of n elements, params[i] at
// element offsets[i], and returns a 1-D handle on the whole storage (the
// caller owns it). The elements outside the parameters are zero. Each
// parameter keeps its identity and becomes a dense view at its offset;
// its old storage is freed. The storage is allocated under cat.
//
// Every parameter must be a live contiguous leaf of the same dtype and
// device, without a gradient, holding the only reference to its storage
// (nothing saved it, no view of it exists), and the ranges
// [offsets[i], offsets[i]+Len) must lie inside [0, n) without overlapping.
// A parameter made by Deferred gets its values drawn in place here.
func Flatten(params []*Tensor, offsets []int, n int, cat memory.Category) (*Tensor, error) {
	if len(params) == 0 || len(offsets) != len(params) {
		return nil, errorf("Flatten", "%d tensors and %d offsets", len(params), len(offsets))
	}
	dev, dtype := params[0].st.dev, params[0].dtype
	type span struct{ lo, hi, i int }
	spans := make([]span, len(params))
	for i, p := range params {
		switch {
		case p == nil || p.released:
			return nil, errorf("Flatten", "tensor %d is nil or released", i)
		case p.node != nil:
			return nil, errorf("Flatten", "%s is the result of an op; only leaves flatten", p.describe())
		case p.grad != nil:
			return nil, errorf("Flatten", "%s has a gradient", p.describe())
		case p.st.refs.Load() != 1:
			return nil, errorf("Flatten", "%s shares its storage with %d other handles", p.describe(), p.st.refs.Load()-1)
		case p.st.evicted && p.st.deferred == nil:
			return nil, errorf("Flatten", "%s is evicted", p.describe())
		case !p.IsContiguous():
			return nil, errorf("Flatten", "%s is not contiguous", p.describe())
		case p.dtype != dtype || p.st.dev != dev:
			return nil, errorf("Flatten", "%s is not %v on the device of %s", p.describe(), dtype, params[0].describe())
		case offsets[i] < 0 || offsets[i]+p.Len() > n:
			return nil, errorf("Flatten", "%s at offset %d does not fit in %d elements", p.describe(), offsets[i], n)
		}
		spans[i] = span{offsets[i], offsets[i] + p.Len(), i}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.lo - b.lo })
	for k := 1; k < len(spans); k++ {
		if spans[k].lo < spans[k-1].hi {
			return nil, errorf("Flatten", "%s overlaps %s", params[spans[k].i].describe(), params[spans[k-1].i].describe())
		}
	}
	flat, err := New(dev, dtype, []int{n}, cat)
	if err != nil {
		return nil, err
	}
	for i, p := range params {
		dst := device.View{Buf: flat.st.buf, DType: dtype, Offset: offsets[i], Shape: p.shape, Strides: contiguousStrides(p.shape)}
		if fill := p.st.deferred; fill != nil {
			if err := fill(dst); err != nil {
				flat.Release()
				return nil, errorf("Flatten", "drawing %s: %v", p.describe(), err)
			}
			continue
		}
		dev.Copy(dst, p.view())
	}
	for i, p := range params {
		p.st.release()
		flat.st.retain()
		p.st, p.offset, p.strides = flat.st, offsets[i], contiguousStrides(p.shape)
	}
	flat.st.evictable = true
	return flat, nil
}

// Deferred returns a leaf of the given shape that holds no memory: its
// storage is born evicted, and fill writes its values (into a contiguous
// view of the same dtype and shape) when Flatten moves it into a flat
// storage; an error of fill is Flatten's. Until then any op that reads
// or writes it panics with *Error naming it. A model built of deferred
// parameters can be sharded one block at a time (dist's ZeRO-3), so the
// whole model never exists on one device. fill must write the same
// values wherever it is called (draws seeded by the parameter, as
// nn.Builder's; a checkpoint's tensor, as an import's: see DeferFrom).
func Deferred(dev device.Device, dtype DType, shape []int, cat memory.Category, fill func(device.View) error) (*Tensor, error) {
	if dev == nil {
		return nil, errorf("Deferred", "nil device")
	}
	for _, d := range shape {
		if d < 0 {
			return nil, errorf("Deferred", "negative dimension in shape %v", shape)
		}
	}
	if dtype.Size() == 0 {
		return nil, errorf("Deferred", "invalid dtype %v", dtype)
	}
	if fill == nil {
		return nil, errorf("Deferred", "nil fill")
	}
	shape = append([]int(nil), shape...)
	st := &storage{dev: dev, size: int64(numel(shape) * dtype.Size()), evicted: true, cat: cat, deferred: fill}
	st.refs.Store(1)
	t := &Tensor{st: st, shape: shape, strides: contiguousStrides(shape), dtype: dtype}
	track(t)
	return t, nil
}

// IsDeferred reports whether t was made by Deferred and has no values yet.
func (t *Tensor) IsDeferred() bool { return t.st.deferred != nil }

// DeferFrom replaces the fill of a deferred t (an import that writes a
// checkpoint's values where a builder would draw) and sets end, which runs
// once when the deferred storage goes: after Flatten has filled it, or
// when t is released unfilled (an import closes its files there).
func (t *Tensor) DeferFrom(fill func(device.View) error, end func()) error {
	t.mustLive("DeferFrom")
	switch {
	case t.st.deferred == nil:
		return errorf("DeferFrom", "%s is not deferred", t.describe())
	case fill == nil:
		return errorf("DeferFrom", "nil fill for %s", t.describe())
	}
	if prev := t.st.deferEnd; prev != nil {
		prev()
	}
	t.st.deferred, t.st.deferEnd = fill, end
	return nil
}

// Evict frees the memory of t's storage (see Flatten) while t and every
// other handle on it stay valid; until Rematerialize, any op that reads
// or writes the storage panics with *Error naming the tensor. Evicting an
// evicted storage does nothing. Only storage made by Flatten evicts.
func (t *Tensor) Evict() error {
	t.mustLive("Evict")
	st := t.st
	switch {
	case !st.evictable:
		return errorf("Evict", "%s was not made by Flatten", t.describe())
	case st.evicted:
		return nil
	}
	st.cat = t.Category()
	st.dev.Free(st.buf)
	st.buf, st.evicted = device.Buffer{}, true
	return nil
}

// Evicted reports whether t's storage is evicted.
func (t *Tensor) Evicted() bool { return t.st.evicted }

// Rematerialize allocates t's evicted storage again, under the category
// it had, and calls fill to write every element (through t or any handle
// on the storage). The storage's version is what it was before: the
// caller writes the values the storage held, or values nothing saved yet
// (a parameter gathered after an update, before its block runs), so the
// tensors autograd saved from it stay valid. If fill fails, the storage is
// evicted again and the error returned; allocating may fail with
// *memory.OOMError.
func (t *Tensor) Rematerialize(fill func() error) error {
	done, err := t.RematerializeLater()
	if err != nil {
		return err
	}
	return done(fill())
}

// RematerializeLater is Rematerialize with the filling left to the
// caller, who may do it on another goroutine (a collective running while
// this goroutine computes): it allocates t's evicted storage now, so
// that the allocation happens at a point of the program and not of the
// other goroutine's timing, and returns done, which must be called on t's
// goroutine once the storage holds its values, before anything reads it:
// done(nil) restores the storage's version (the writer may have counted
// its writes as changes), done(err) evicts the storage again and returns
// err. Until done is called nothing but the filler may touch the storage.
func (t *Tensor) RematerializeLater() (done func(error) error, err error) {
	t.mustLive("RematerializeLater")
	st := t.st
	if !st.evicted {
		return nil, errorf("Rematerialize", "%s is not evicted", t.describe())
	}
	buf, err := st.dev.Alloc(st.size, st.cat)
	if err != nil {
		return nil, err
	}
	v := st.version.Load()
	st.buf, st.evicted = buf, false
	return func(fillErr error) error {
		st.version.Store(v)
		if fillErr != nil {
			st.dev.Free(st.buf)
			st.buf, st.evicted = device.Buffer{}, true
		}
		return fillErr
	}, nil
}
