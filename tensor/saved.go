package tensor

import (
	"sync"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// SavedHooks decides how the tensors an op saves for backward are kept
// (PyTorch's saved-tensor hooks). Every tensor a recording op saves —
// built-in ops and Function alike — passes through the Pack of the hooks
// of the scope the op runs in (SaveHooks), so a technique that moves saved
// tensors elsewhere (to host memory, compressed) needs no change to any
// op. Hooks are a mode of the scope like NoGrad and Autocast: With and
// WithModes carry them, backward functions run without them, and a
// checkpointed segment's recomputation, which runs in a fresh scope of
// its own, saves without them (its tensors are used at once by the nested
// backward, so packing them would only cost copies).
type SavedHooks interface {
	// Pack is called as an op saves t. It returns the form the node
	// keeps instead of a reference to t's storage, or nil to keep t as
	// usual. t is borrowed: Pack must not release it, and whatever it
	// keeps must stay valid after t's storage is freed or written.
	Pack(t *Tensor) Packed
}

// Packed is a saved tensor in the form a SavedHooks keeps it.
type Packed interface {
	// Unpack returns a handle on the saved elements as they were when
	// packed: on the device, with the dtype, shape and strides of the
	// saved tensor. Backward calls it just before the node that saved
	// the tensor runs, owns the handle and releases it after the node
	// has run; with RetainGraph it may be called again in a later pass.
	Unpack() *Tensor
	// Release drops the packed form. It is called exactly once: after
	// the node's last backward, or when its graph is freed without one.
	Release()
}

// SaveHooks makes recording ops of the scope hand what they save to h
// (nil: save references, the default). The in-place version check still
// applies: a saved tensor whose storage is written in place after it was
// packed fails backward as it would unpacked.
func SaveHooks(h SavedHooks) ScopeOption { return func(s *Scope) { s.hooks = h } }

// SavedHooks returns the scope's saved-tensor hooks, or nil.
func (s *Scope) SavedHooks() SavedHooks { return s.hooks }

// save records the tensors a node keeps for backward: a reference each,
// or what hooks packs them into.
func (n *node) save(hooks SavedHooks, save []*Tensor) {
	if len(save) == 0 {
		return
	}
	n.saved = make([]*Tensor, len(save))
	n.versions = make([]int64, len(save))
	n.savedSt = make([]*storage, len(save))
	for i, t := range save {
		n.savedSt[i] = t.st
		n.versions[i] = t.st.version.Load()
		if hooks != nil {
			if p := hooks.Pack(t); p != nil {
				if n.packed == nil {
					n.packed = make([]Packed, len(save))
				}
				n.packed[i] = p
				continue
			}
		}
		n.saved[i] = t.share()
	}
}

// unpack brings the packed saved tensors back before the node runs.
func (n *node) unpack() {
	for i, p := range n.packed {
		if p != nil && n.saved[i] == nil {
			n.saved[i] = p.Unpack()
		}
	}
}

// dropUnpacked releases the handles unpack made, keeping the packed forms
// for another pass (RetainGraph).
func (n *node) dropUnpacked() {
	for i, p := range n.packed {
		if p != nil && n.saved[i] != nil {
			n.saved[i].Release()
			n.saved[i] = nil
		}
	}
}

// StorageKey identifies the elements a tensor holds at one moment: handles
// that share storage have equal keys until the storage is written in place
// (the key includes its version). A SavedHooks uses it to pack a storage
// saved by several nodes once.
type StorageKey struct {
	st      *storage
	version int64
}

// StorageKey returns t's storage key.
func (t *Tensor) StorageKey() StorageKey {
	t.mustLive("StorageKey")
	return StorageKey{st: t.st, version: t.st.version.Load()}
}

// StorageBytes is the size of t's whole storage (what freeing every handle
// on it returns to the allocator), which may exceed t.Bytes() for a view.
func (t *Tensor) StorageBytes() int64 {
	t.mustLive("StorageBytes")
	if b := t.st.buf.Block; b != nil {
		return b.Requested()
	}
	return int64(len(t.st.buf.Host))
}

// CopyStorage copies t's whole storage into a new allocation on dev
// counted under cat, and returns a handle on the copy with t's dtype,
// shape, strides and offset: the way to move a tensor, views and all, to
// another device (activation offload moves saved tensors to host memory
// and back with it). Copies go through host-addressable memory where
// either side has it (a device's Read or Write), so a CUDA device copies
// to and from a CPU device directly. It panics with *memory.OOMError when
// dev is full, as ops do.
func (t *Tensor) CopyStorage(dev device.Device, cat memory.Category) *Tensor {
	t.mustLive("CopyStorage")
	c := t.AllocStorage(dev, cat)
	copyBuffer(dev, c.st.buf, t.st.dev, t.st.buf, t.StorageBytes())
	return c
}

// AllocStorage is CopyStorage without the copy: a new allocation of t's
// storage size on dev, counted under cat, whose contents are undefined
// until CopyStorageFrom fills it. It lets the allocation happen at one
// moment and the copy at another, or on another goroutine (offload
// reserves host gradients before backward fills them, and brings
// activations back on a goroutine of its own).
func (t *Tensor) AllocStorage(dev device.Device, cat memory.Category) *Tensor {
	t.mustLive("AllocStorage")
	buf, err := dev.Alloc(t.StorageBytes(), cat)
	if err != nil {
		panic(err)
	}
	st := &storage{dev: dev, buf: buf}
	st.refs.Store(1)
	c := &Tensor{st: st, shape: t.shape, strides: t.strides, offset: t.offset, dtype: t.dtype, name: t.name}
	track(c)
	return c
}

// Alias returns a new handle on t's storage with like's dtype, shape,
// strides and offset, for rebuilding views of a storage that CopyStorage
// moved: like is a handle on the moved storage's twin. like's storage
// must be at least as large as t's view needs.
func (t *Tensor) Alias(like *Tensor) *Tensor {
	t.mustLive("Alias")
	like.mustLive("Alias")
	if like.StorageBytes() > t.StorageBytes() {
		panic(errorf("Alias", "%s: a storage of %d bytes cannot hold a view of one of %d bytes", t.describe(), t.StorageBytes(), like.StorageBytes()))
	}
	t.st.retain()
	a := &Tensor{st: t.st, shape: like.shape, strides: like.strides, offset: like.offset, dtype: like.dtype, name: like.name}
	track(a)
	return a
}

// bounce carries copies between two devices neither of which exposes host
// bytes (two meta devices while planning, two GPUs), a chunk at a time so
// that no copy makes a Go buffer of its size.
var bounce = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// copyBuffer copies n bytes from src (on sdev) to dst (on ddev). Into a
// device that stores no values (a planning one) there is nothing to copy:
// a plan's offloaded activations would otherwise go through the bounce
// buffer, zeroed chunk by chunk, for every byte they move.
func copyBuffer(ddev device.Device, dst device.Buffer, sdev device.Device, src device.Buffer, n int64) {
	switch {
	case n == 0 || !device.StoresValues(ddev):
	case dst.Host != nil && src.Host != nil:
		copy(dst.Host[:n], src.Host[:n])
	case dst.Host != nil:
		sdev.Read(dst.Host[:n], src, 0)
	case src.Host != nil:
		ddev.Write(dst, 0, src.Host[:n])
	default:
		bp := bounce.Get().(*[]byte)
		defer bounce.Put(bp)
		b := *bp
		for off := int64(0); off < n; off += int64(len(b)) {
			c := b[:min(int64(len(b)), n-off)]
			sdev.Read(c, src, off)
			ddev.Write(dst, off, c)
		}
	}
}

// CopyStorageFrom overwrites t's whole storage with src's, which may be
// on another device and must be as large: how an updated host copy of a
// parameter is written back (optimizer offload). It counts as an in-place
// write of t.
func (t *Tensor) CopyStorageFrom(src *Tensor) {
	t.mustLive("CopyStorageFrom")
	src.mustLive("CopyStorageFrom")
	if n, m := t.StorageBytes(), src.StorageBytes(); n != m {
		panic(errorf("CopyStorageFrom", "%s: storage of %d bytes, source %s has %d", t.describe(), n, src.describe(), m))
	}
	copyBuffer(t.st.dev, t.st.buf, src.st.dev, src.st.buf, t.StorageBytes())
	t.st.version.Add(1)
}
