package offload

import (
	"fmt"
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Activations moves the activations autograd saves to a host device as
// ops save them and brings them back for backward. It is a
// tensor.SavedHooks: install it on the step's scope with
// tensor.SaveHooks, and wrap the model's block runner with Runner so that
// saved tensors are grouped by block, which is what prefetching counts.
//
// What moves: saved tensors whose storage is counted as
// memory.Activation on the device (results of forward ops, a
// checkpointed segment's input). Parameters, their autocast copies
// (memory.Temporary), gradients and data batches stay where they are.
// Each storage moves whole and once, however many nodes save it or views
// of it, so the host holds exactly the bytes the device let go of; the
// host allocator counts them as memory.Activation (a host device has an
// allocator of its own, so the category keeps its meaning and the
// summary of each allocator adds up).
//
// Coming back: backward unpacks a saved tensor just before the node that
// saved it runs. The first unpack of a block's tensors also brings back
// the tensors of the next Window blocks backward will reach (prefetch),
// whole; the block being differentiated comes back tensor by tensor as
// its nodes run. A restored storage is freed on the device as soon as the
// last node that saved it has run. Where both devices are CPU devices a
// prefetch's copies run on a goroutine of their own while backward goes
// on: the device memory is allocated at once, on backward's goroutine,
// where a synchronous prefetch would allocate it, so the peaks are the
// same to the byte; an Unpack, or freeing the entry, waits for its copy.
// Elsewhere (the CUDA device, whose copies are ordered with its kernels
// on one stream, and the meta device of plans) prefetched copies complete
// before Unpack returns. Either way prefetching raises the device's peak
// by the window's blocks, and on the CPU it gains little (BENCHMARKS.md):
// copying a tensor back just before its node reads it warms the cache
// for that node, and the two "devices" share one memory. Window 0 is the
// default. The copy to the host at Pack is synchronous everywhere: an
// asynchronous one would read the saved storage while forward goes on,
// and an in-place write into a saved tensor — an error that the version
// checks report only in backward — would race with it.
//
// The device peak of the saved activations is then at most the largest
// block's plus the Window blocks after it, instead of all of them;
// results are bit for bit those without offload (the bytes are copied,
// never converted). With tensor.RetainGraph a restored storage stays on
// the device until the graph's last backward. An Activations serves one
// goroutine (the scope's) at a time.
type Activations struct {
	host   device.Device
	window int

	entries map[tensor.StorageKey]*entry
	groups  []*group // live groups in forward order (ascending id)
	cur     int64    // group of what is saved now
	seq     int64    // last group id handed out
	ahead   []*entry // restores of the prefetch being made, to copy

	stats Stats
}

// Stats counts what an Activations moved.
type Stats struct {
	Packed     int64 // storages moved to the host
	PackedB    int64 // their bytes
	Restored   int64 // storages brought back to the device
	RestoredB  int64 // their bytes
	Prefetched int64 // of Restored, brought back ahead of their block
	// MaxGroupB is the largest group's bytes: what one block (or the
	// stretch before the first block or after the last) saved. The
	// device's activation peak in backward is at most (1+Window) times
	// it, plus what forward results are still alive (the loss).
	MaxGroupB int64
}

type group struct {
	id      int64
	entries []*entry
	bytes   int64 // packed bytes of the group
	fetched bool  // prefetch already ran for this group
}

// entry is one moved storage: its host copy, and its device copy while
// backward needs it.
type entry struct {
	key   tensor.StorageKey
	dev   device.Device
	g     *group
	host  *tensor.Tensor // first handle packed on the host copy
	back  *tensor.Tensor // the device copy, once restored
	users int            // packed handles not yet released

	// A prefetch in flight (copyAhead): the copier reads src, a handle
	// of its own on the host copy (the packed handles are released on
	// backward's goroutine meanwhile), and writes back; ready is closed
	// once it is done, failed is what the copy panicked with.
	src    *tensor.Tensor
	ready  chan struct{}
	failed any
}

// packed is the handle a node keeps: a view on an entry's host copy.
type packed struct {
	a    *Activations
	e    *entry
	host *tensor.Tensor
}

// NewActivations returns an offloader that keeps saved activations on
// host (a CPU device in practice; any device with its own allocator in
// tests and plans) and prefetches window blocks ahead in backward.
func NewActivations(host device.Device, window int) (*Activations, error) {
	if host == nil {
		return nil, fmt.Errorf("offload: no host device")
	}
	if window < 0 {
		return nil, fmt.Errorf("offload: prefetch window %d is negative", window)
	}
	return &Activations{host: host, window: window, entries: map[tensor.StorageKey]*entry{}}, nil
}

// Host is the device the activations move to.
func (a *Activations) Host() device.Device { return a.host }

// Window is the number of blocks prefetched ahead in backward.
func (a *Activations) Window() int { return a.window }

// Stats returns what has moved so far.
func (a *Activations) Stats() Stats { return a.stats }

// Live is the number of storages held on the host now: 0 between steps.
func (a *Activations) Live() int { return len(a.entries) }

// Pack implements tensor.SavedHooks. A leaf that wants a gradient stays
// where it is: whoever reads that gradient holds the leaf, and with it
// its storage on the device (a tiled block's input leaf, say), so a host
// copy would only be a second one.
func (a *Activations) Pack(t *tensor.Tensor) tensor.Packed {
	if t.Category() != memory.Activation || t.Device() == a.host || (t.IsLeaf() && t.RequiresGrad()) {
		return nil
	}
	key := t.StorageKey()
	e := a.entries[key]
	if e == nil {
		g := a.groupFor(a.cur)
		e = &entry{key: key, dev: t.Device(), g: g, host: t.CopyStorage(a.host, memory.Activation)}
		g.entries = append(g.entries, e)
		a.entries[key] = e
		a.stats.Packed++
		a.stats.PackedB += t.StorageBytes()
		g.bytes += t.StorageBytes()
		a.stats.MaxGroupB = max(a.stats.MaxGroupB, g.bytes)
		e.users++
		return &packed{a: a, e: e, host: e.host}
	}
	e.users++
	return &packed{a: a, e: e, host: e.host.Alias(t)}
}

// groupFor returns the live group id, making it when it is new. Groups
// are made in forward order, so the slice stays sorted.
func (a *Activations) groupFor(id int64) *group {
	if n := len(a.groups); n > 0 && a.groups[n-1].id == id {
		return a.groups[n-1]
	}
	g := &group{id: id}
	a.groups = append(a.groups, g)
	return g
}

// Unpack implements tensor.Packed.
func (p *packed) Unpack() *tensor.Tensor {
	a, e := p.a, p.e
	if !e.g.fetched {
		e.g.fetched = true
		a.prefetch(e.g)
	}
	a.restore(e, false)
	e.wait()
	if e.failed != nil {
		panic(e.failed) // as the copy would have on this goroutine
	}
	return e.back.Alias(p.host)
}

// wait waits for e's prefetch in flight, if any. The copier's handle is
// released here, on backward's goroutine; it never frees the storage,
// which e.host holds.
func (e *entry) wait() {
	if e.ready != nil {
		<-e.ready
		e.ready = nil
		e.src.Release()
		e.src = nil
	}
}

// Release implements tensor.Packed.
func (p *packed) Release() {
	p.host.Release()
	if e := p.e; e != nil {
		p.e = nil
		e.users--
		if e.users == 0 {
			p.a.drop(e)
		}
	}
}

// restore brings e's storage back to its device: at once, or, ahead of
// its block and where both devices allow it (asyncCopies), allocated now
// and copied by a goroutine of the prefetch's (e.ready).
func (a *Activations) restore(e *entry, ahead bool) {
	if e.back != nil {
		return
	}
	if ahead && asyncPrefetch && asyncCopies(e.dev) && asyncCopies(a.host) {
		// The allocation stays here, at the moment the synchronous
		// restore would make it: the device's peak does not depend on
		// the copier's progress.
		e.back = e.host.AllocStorage(e.dev, memory.Activation)
		e.src = e.host.Alias(e.host)
		e.ready = make(chan struct{})
		a.ahead = append(a.ahead, e)
	} else {
		e.back = e.host.CopyStorage(e.dev, memory.Activation)
	}
	a.stats.Restored++
	a.stats.RestoredB += e.back.StorageBytes()
	if ahead {
		a.stats.Prefetched++
	}
}

// asyncPrefetch turns asynchronous prefetching off when false: a
// variable so that tests can compare the two.
var asyncPrefetch = true

// asyncCopies reports whether copies to and from dev may run on another
// goroutine while the training goroutine computes: on the CPU device they
// are memcpy between Go buffers. The CUDA device's copies go through its
// context's thread on the compute stream, behind the kernels (Write
// stages through pinned buffers; Read waits for the stream): to overlap
// them with compute it would need a copy stream of its own, events
// ordering it against the compute stream, and copies straight from
// pinned host tensors (cuMemcpyHtoDAsync, cuStreamWaitEvent).
func asyncCopies(dev device.Device) bool {
	switch dev.Memory().Device() {
	case "cpu", "host": // a CPU device, or one labelled as host memory
		return true
	}
	return false
}

// copyAhead copies the prefetched storages in order, on the goroutine
// it runs on, and signals each as it completes. It touches only the
// entries' host copies and device copies, which nothing else writes
// until their ready is closed.
func copyAhead(es []*entry) {
	for _, e := range es {
		func() {
			defer close(e.ready)
			defer func() { e.failed = recover() }()
			e.back.CopyStorageFrom(e.src)
		}()
	}
}

// prefetch restores the groups backward reaches after g: the window live
// groups before it in forward order, copied on a goroutine of their own
// where the devices allow it.
func (a *Activations) prefetch(g *group) {
	if a.window == 0 {
		return
	}
	defer func() {
		if len(a.ahead) > 0 {
			go copyAhead(a.ahead)
			a.ahead = nil
		}
	}()
	i, _ := slices.BinarySearchFunc(a.groups, g.id, func(x *group, id int64) int {
		switch {
		case x.id < id:
			return -1
		case x.id > id:
			return 1
		}
		return 0
	})
	for j := i - 1; j >= 0 && j >= i-a.window; j-- {
		for _, e := range a.groups[j].entries {
			a.restore(e, true)
		}
	}
}

// drop frees an entry whose every packed handle is released.
func (a *Activations) drop(e *entry) {
	e.wait() // the copier may be reading host and writing back
	e.host.Release()
	if e.back != nil {
		e.back.Release()
	}
	delete(a.entries, e.key)
	g := e.g
	if i := slices.Index(g.entries, e); i >= 0 {
		g.entries = slices.Delete(g.entries, i, i+1)
	}
	if len(g.entries) == 0 {
		if i := slices.Index(a.groups, g); i >= 0 {
			a.groups = slices.Delete(a.groups, i, i+1)
		}
	}
}

// Runner wraps a block runner (a checkpoint policy's, or
// nn.RunSequential when inner is nil) so that what each block saves forms
// a group of its own: the unit of prefetching. What runs before the first
// block and after the last forms groups too.
func (a *Activations) Runner(inner nn.BlockRunner) nn.BlockRunner {
	if inner == nil {
		inner = nn.RunSequential
	}
	return func(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
		marked := make([]nn.Module, len(blocks))
		for i, b := range blocks {
			marked[i] = markedBlock{Module: b, a: a}
		}
		return inner(r, marked, x)
	}
}

// markedBlock starts a new group for its block's forward and another
// after it.
type markedBlock struct {
	nn.Module
	a *Activations
}

func (m markedBlock) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	m.a.next()
	defer m.a.next()
	return m.Module.Forward(r, x)
}

func (a *Activations) next() {
	a.seq++
	a.cur = a.seq
}
