package tensor

import (
	"slices"
	"sync"

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
	case !st.evictable || st.parking() != nil:
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

// Parked storage: a frozen weight kept in host memory and brought to the
// device it is used on only while it is used (offload.Base streams a
// model's frozen base block by block this way). Park moves t's storage to
// a host device: a copy there, under the category it had, and its device
// memory freed. A parked storage holds its values — on the host: a
// parked tensor reads and writes as a host tensor does (Float32s,
// SetFloat32s, AllFinite), and an op that meets it with tensors of the
// device it was parked from fails naming the two devices, never reading
// stale memory. Fetch (or FetchLater) allocates it on that device again
// and copies it there; Unfetch frees the device's copy, so that the
// storage is on the host again. Every handle on the storage — views,
// what autograd saved from it — follows it, as for Evict, and the
// storage's version is kept, so a node that saved the weight before it
// went home runs its backward on the values fetched again. A parked
// storage owns its host copy: releasing its last handle frees it (and
// the device's copy, if fetched). Its casts stay out of autocast's weight
// cache, which would keep a copy on the device past the fetch.

// parking is what Park remembers of a storage: the host and its copy
// there, and the device the storage is used on.
type parking struct {
	home    device.Device
	homeBuf device.Buffer // the host copy while fetched (st.buf otherwise)
	away    device.Device
	fetched bool
	version int64 // at the fetch: an in-place write meanwhile goes home at Unfetch
	bytes   int64
}

// parkings maps a parked storage to its parking until its last handle
// goes (the storage's deferEnd removes it).
var parkings sync.Map // *storage → *parking

func (st *storage) parking() *parking {
	if p, ok := parkings.Load(st); ok {
		return p.(*parking)
	}
	return nil
}

// checkLive is mustLive as an error, for every dtype.
func (t *Tensor) checkLive(op string) error {
	switch {
	case t == nil:
		return errorf(op, "nil tensor")
	case t.released:
		return errorf(op, "use of released tensor %s", t.describe())
	}
	return nil
}

// Park moves t's storage to host, which must store values where t's
// device does (a CPU device for a GPU's tensors; a second CPU device, or
// a second meta device while planning, for tests and plans): a copy
// allocated there under t's category, the device's memory freed. t must
// be a live leaf that does not require grad and has no gradient (a
// frozen weight), on memory of its own: not made by Flatten or Deferred,
// not parked already.
func (t *Tensor) Park(host device.Device) error {
	if err := t.checkLive("Park"); err != nil {
		return err
	}
	st := t.st
	switch {
	case host == nil:
		return errorf("Park", "%s: no host device", t.describe())
	case host == st.dev:
		return errorf("Park", "%s is on the host device already", t.describe())
	case t.node != nil:
		return errorf("Park", "%s is the result of an op; only leaves park", t.describe())
	case t.requiresGrad || t.grad != nil:
		return errorf("Park", "%s requires grad: only a frozen tensor parks", t.describe())
	case st.parking() != nil:
		return errorf("Park", "%s is parked already", t.describe())
	case st.evictable || st.evicted || st.deferred != nil || st.deferEnd != nil:
		return errorf("Park", "%s is flattened, evicted or deferred", t.describe())
	}
	n := t.StorageBytes()
	cat := t.Category()
	buf, err := host.Alloc(n, cat)
	if err != nil {
		return err
	}
	copyBuffer(host, buf, st.dev, st.buf, n)
	p := &parking{home: host, away: st.dev, bytes: n}
	st.dev.Free(st.buf)
	st.buf, st.dev, st.evictable = buf, host, true
	parkings.Store(st, p)
	st.deferEnd = func() {
		// release freed st.buf: the device's copy while fetched (the
		// host's stays to free here), the host's otherwise.
		if p.fetched {
			p.home.Free(p.homeBuf)
		}
		parkings.Delete(st)
	}
	return nil
}

// Parked reports whether Park moved t's storage to a host device (fetched
// to its device now or not).
func (t *Tensor) Parked() bool { return t.st.parking() != nil }

// UsedOn returns the device ops on t run on: the one Park moved it away
// from when t is parked (its storage may be on the host between uses),
// its own device otherwise. Tensors made to work beside t, such as a
// frozen weight's adapter, belong there.
func (t *Tensor) UsedOn() device.Device {
	if p := t.st.parking(); p != nil {
		return p.away
	}
	return t.st.dev
}

// Fetched reports whether t's parked storage is on its device now.
func (t *Tensor) Fetched() bool {
	p := t.st.parking()
	return p != nil && p.fetched
}

// FetchLater is Fetch with the copy left to the caller, who may make it
// on another goroutine or a stream of the device's own (a prefetch while
// the device computes): it allocates t's parked storage on the device it
// was parked from now, so that the allocation happens at a point of the
// program rather than of another goroutine's timing, and t uses that
// memory from here on. It returns the two buffers, dst on the device and
// src on the host, the n bytes to copy from src to dst, and done, which
// must be called on t's goroutine once dst holds them and before
// anything reads t: done(nil) ends the fetch, done(err) frees dst (the
// storage is on the host again) and returns err. Until done is called,
// nothing but the copier may touch the storage. The allocation may fail
// with *memory.OOMError.
func (t *Tensor) FetchLater() (dst, src device.Buffer, n int64, done func(error) error, err error) {
	if err := t.checkLive("Fetch"); err != nil {
		return dst, src, 0, nil, err
	}
	st := t.st
	p := st.parking()
	switch {
	case p == nil:
		return dst, src, 0, nil, errorf("Fetch", "%s is not parked", t.describe())
	case p.fetched:
		return dst, src, 0, nil, errorf("Fetch", "%s is fetched already", t.describe())
	}
	buf, err := p.away.Alloc(p.bytes, t.Category())
	if err != nil {
		return dst, src, 0, nil, err
	}
	p.homeBuf, p.fetched, p.version = st.buf, true, st.version.Load()
	st.buf, st.dev = buf, p.away
	return buf, p.homeBuf, p.bytes, func(fillErr error) error {
		if fillErr != nil {
			st.version.Store(p.version)
			p.away.Free(st.buf)
			st.buf, st.dev, p.homeBuf, p.fetched = p.homeBuf, p.home, device.Buffer{}, false
		}
		return fillErr
	}, nil
}

// Fetch allocates t's parked storage on the device it was parked from
// again and copies the host's values there; t reads and writes that copy
// until Unfetch.
func (t *Tensor) Fetch() error {
	dst, src, n, done, err := t.FetchLater()
	if err != nil {
		return err
	}
	copyBuffer(t.st.dev, dst, t.st.parking().home, src, n)
	return done(nil)
}

// Unfetch frees the device's copy of t's fetched storage: t is on the
// host again. A write to the device's copy since the fetch (none to a
// frozen weight, in practice) is copied home first.
func (t *Tensor) Unfetch() error {
	if err := t.checkLive("Unfetch"); err != nil {
		return err
	}
	st := t.st
	p := st.parking()
	if p == nil || !p.fetched {
		return errorf("Unfetch", "%s is not fetched", t.describe())
	}
	if st.version.Load() != p.version {
		copyBuffer(p.home, p.homeBuf, p.away, st.buf, p.bytes)
	}
	p.away.Free(st.buf)
	st.buf, st.dev, p.homeBuf, p.fetched = p.homeBuf, p.home, device.Buffer{}, false
	return nil
}
