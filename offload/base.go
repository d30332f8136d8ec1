package offload

import (
	"errors"
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// Base streams the frozen weights of a model's blocks from host memory:
// each block's (a LoRA base's Linear weights, in nf4, int8, bf16 or any
// dtype they are held in) live on the host between uses, parked there
// (tensor.Park: the weights stay the model's tensors, readable and
// writable on the host, and whatever autograd saved of them stays
// valid), and are brought to the device — fetched — for the block's
// forward, for its recomputation under activation checkpointing, and for
// its backward (a Linear's backward over a frozen weight reads it to give
// the input its gradient), then freed there again.
//
// Runner wraps the model's block runner (a checkpoint policy's, offload's
// Activations', or nn.RunSequential), as ZeRO-3 wraps it: around each
// block the weights are fetched before its forward and freed after it,
// and an autograd node on the block's output fetches them again before
// the block's backward begins; a node on its input (when the input needs
// a gradient) frees them when that backward has ended. A block whose
// input needs no gradient (the first, over frozen embeddings) keeps them
// until the pass settles: Settle, which the trainer calls after backward.
//
// Double buffering. A training pass (BeforeForward to Settle) fetches the
// blocks in an order fixed by the graph — forward in order, then
// backward in reverse, each checkpointed block's recomputation just
// before its backward — which Base records as the pass's trace. From the
// next pass on, when a block is fetched the fetch of the block the trace
// says comes next starts at once, while the current one computes, and a
// block whose next fetch is the very next one (the last block, whose
// backward follows its forward; a checkpointed block between its
// recomputation and its backward) stays on the device instead of going
// home and coming back. A pass that departs from the trace is recorded
// anew from where it departed, with no prefetch until then: a wrong
// trace costs time, never correctness. An evaluation (a forward without
// gradients) prefetches the next block of the model instead. At most two
// blocks' weights are on the device at once: the one computing and the
// one being fetched (or kept).
//
// Copies. Every allocation is made on the training goroutine, at a point
// fixed by the pass's order (tensor.FetchLater), so a plan on meta devices
// allocates what a run does, byte for byte. The copy into it is made by
// the device's copy stream where the device has one (CUDA's UploadAsync,
// from the pinned memory of a host device on device.HostMemory; the
// compute stream waits for it, AwaitUploads, only when the block is about
// to run), by a goroutine of its own where both sides are CPU devices and
// the fetch is ahead of its use (the training goroutine waits for it
// when the block runs), and at once otherwise. The bytes are copied,
// never converted: a run streams the same weights, bit for bit.
//
// The device holds the weights of at most two blocks; the host holds
// them all, counted under their category there (memory.Parameter). A Base
// serves one goroutine (the scope's) at a time.
type Base struct {
	host   device.Device
	groups []*baseGroup // in the model's block order
	byMod  map[nn.Module]*baseGroup
	// trace is the order of the last training pass's fetches, pos the
	// position in it of the current pass's next fetch; inPass is set
	// from BeforeForward until Settle, eval while a forward without
	// gradients runs.
	trace  []*baseGroup
	pos    int
	inPass bool
	eval   bool
	// unsynced: an upload may still read host memory (SyncUploads
	// before it changes).
	unsynced bool
	stats    BaseStats
}

// BaseStats counts what a Base moved.
type BaseStats struct {
	Fetches    int64 // blocks' weights brought to the device
	FetchedB   int64 // their bytes
	Prefetches int64 // of Fetches, started ahead of their use
	Kept       int64 // fetches saved by keeping a block on the device
}

// uploader is a device that copies host memory to itself on a stream of
// its own (the CUDA device's copy stream), which its computation waits
// for only when told.
type uploader interface {
	UploadAsync(dst device.Buffer, off int64, src []byte) error
	AwaitUploads() error
	SyncUploads() error
}

// baseGroup is one block's streamed weights.
type baseGroup struct {
	name    string
	index   int // in Base.groups
	dev     device.Device
	up      uploader // the device's copy stream, nil without one
	weights []*tensor.Tensor
	bytes   int64

	fetched bool                // on the device (its values may still be arriving)
	dones   []func(error) error // a fetch not completed yet (tensor.FetchLater)
	// A copy on a goroutine of its own: ready is closed when it is done,
	// failed is what it panicked with.
	ready  chan struct{}
	failed any
	// uploaded: queued on the copy stream, not awaited yet.
	uploaded bool
	// kept: on the device although its use ended, because the trace says
	// its next fetch is the pass's next.
	kept bool
}

// NewBase parks on host the parameters of each of blocks for which
// streams reports true (the trainer's: the frozen Linear weights), one at
// a time, so that the device never holds more than it did, and returns
// their streamer. A parameter of two blocks is an error. Install its
// runner with model.SetBlockRunner(b.Runner(inner)); call BeforeForward
// before each training forward, and Settle after its backward and after
// an evaluation.
func NewBase(host device.Device, blocks []nn.Module, streams func(*tensor.Tensor) bool) (*Base, error) {
	if host == nil {
		return nil, fmt.Errorf("offload: no host device")
	}
	b := &Base{host: host, byMod: map[nn.Module]*baseGroup{}}
	seen := map[*tensor.Tensor]bool{}
	for i, m := range blocks {
		var ws []*tensor.Tensor
		for _, p := range m.Parameters() {
			if !streams(p) {
				continue
			}
			if seen[p] {
				return nil, fmt.Errorf("offload: base: parameter %s belongs to two blocks", p.Name())
			}
			seen[p] = true
			ws = append(ws, p)
		}
		if len(ws) == 0 {
			continue
		}
		g := &baseGroup{name: fmt.Sprintf("block %d", i), index: len(b.groups), dev: ws[0].UsedOn(), weights: ws}
		if up, ok := device.As[uploader](g.dev); ok {
			g.up = up
		}
		b.groups = append(b.groups, g)
		b.byMod[m] = g
	}
	for _, g := range b.groups {
		for _, w := range g.weights {
			if w.UsedOn() != g.dev {
				return nil, b.abandon(fmt.Errorf("offload: base: %s is on %s, the rest of %s on %s", w.Name(), w.UsedOn().Name(), g.name, g.dev.Name()))
			}
			n := w.StorageBytes()
			if w.Parked() {
				// Parked as it was made (a model built for a streamed
				// base never holds it whole on the device).
				if w.Device() != host || w.Fetched() {
					return nil, b.abandon(fmt.Errorf("offload: base: %s is parked elsewhere than the host's memory", w.Name()))
				}
			} else if err := w.Park(host); err != nil {
				return nil, b.abandon(fmt.Errorf("offload: base: %s: %w", w.Name(), err))
			}
			g.bytes += n
		}
	}
	return b, nil
}

// abandon brings what NewBase parked back to the device (fetched, where
// it is used as before) and returns err.
func (b *Base) abandon(err error) error {
	for _, g := range b.groups {
		for _, w := range g.weights {
			if w.Parked() && !w.Fetched() {
				_ = w.Fetch()
			}
		}
	}
	return err
}

// Host is the device the weights live on.
func (b *Base) Host() device.Device { return b.host }

// Blocks is the number of blocks whose weights stream.
func (b *Base) Blocks() int { return len(b.groups) }

// Bytes is the streamed weights' size, all blocks together: what the
// host holds.
func (b *Base) Bytes() int64 {
	var n int64
	for _, g := range b.groups {
		n += g.bytes
	}
	return n
}

// MaxBlockBytes is the largest block's streamed weights.
func (b *Base) MaxBlockBytes() int64 {
	var n int64
	for _, g := range b.groups {
		n = max(n, g.bytes)
	}
	return n
}

// Weights lists the streamed weights, block by block.
func (b *Base) Weights() []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, g := range b.groups {
		out = append(out, g.weights...)
	}
	return out
}

// Stats returns what has moved so far.
func (b *Base) Stats() BaseStats { return b.stats }

// Fetched is the number of blocks whose weights are on the device now.
func (b *Base) Fetched() int {
	n := 0
	for _, g := range b.groups {
		if g.fetched {
			n++
		}
	}
	return n
}

// loading reports whether g's fetch has not been completed.
func (g *baseGroup) loading() bool { return len(g.dones) > 0 }

// fetch allocates g's weights on their device and starts copying them
// there (ahead: for a use that has not come yet). On an allocation's
// failure nothing stays allocated and the error is returned.
func (b *Base) fetch(g *baseGroup, ahead bool) error {
	type job struct {
		dst, src device.Buffer
		n        int64
	}
	jobs := make([]job, 0, len(g.weights))
	for _, w := range g.weights {
		dst, src, n, done, err := w.FetchLater()
		if err != nil {
			b.undo(g)
			return err
		}
		g.dones = append(g.dones, done)
		jobs = append(jobs, job{dst, src, n})
	}
	g.fetched = true
	b.stats.Fetches++
	b.stats.FetchedB += g.bytes
	if ahead {
		b.stats.Prefetches++
	}
	switch {
	case !device.StoresValues(g.dev):
		// A plan: the allocations are what counts.
	case g.up != nil:
		b.unsynced = true
		for _, j := range jobs {
			if err := g.up.UploadAsync(j.dst, 0, j.src.Host[:j.n]); err != nil {
				// What was queued must be behind the compute stream
				// before its memory goes back to the allocator.
				err = errors.Join(err, g.up.AwaitUploads())
				b.undo(g)
				return err
			}
		}
		g.uploaded = true
	case ahead && asyncPrefetch && asyncCopies(g.dev) && asyncCopies(b.host):
		ready := make(chan struct{})
		g.ready = ready
		go func() {
			defer close(ready)
			defer func() { g.failed = recover() }()
			for _, j := range jobs {
				copy(j.dst.Host[:j.n], j.src.Host[:j.n])
			}
		}()
	default:
		for _, j := range jobs {
			if j.dst.Host != nil {
				copy(j.dst.Host[:j.n], j.src.Host[:j.n])
			} else {
				g.dev.Write(j.dst, 0, j.src.Host[:j.n])
			}
		}
	}
	return nil
}

// undo frees a fetch that did not complete: its weights are home again.
func (b *Base) undo(g *baseGroup) {
	for _, done := range g.dones {
		_ = done(errUndone)
	}
	g.dones, g.fetched, g.uploaded, g.kept = nil, false, false, false
}

var errUndone = errors.New("offload: base: fetch undone")

// complete waits for g's copy in flight (the host for a goroutine's; the
// compute stream, not the host, for an upload) and ends the fetch: its
// weights may be read from here on.
func (b *Base) complete(g *baseGroup) error {
	if g.ready != nil {
		<-g.ready
		g.ready = nil
		if f := g.failed; f != nil {
			g.failed = nil
			b.undo(g)
			return fmt.Errorf("offload: base: copying %s to the device: %v", g.name, f)
		}
	}
	if g.uploaded {
		if err := g.up.AwaitUploads(); err != nil {
			b.undo(g)
			return err
		}
		g.uploaded = false
	}
	for _, done := range g.dones {
		_ = done(nil)
	}
	g.dones = nil
	return nil
}

// acquire makes g's weights available on the device: it completes a
// prefetch, takes a kept block as it is, or fetches. In a training pass
// each of these is the next step of the trace, and starts the prefetch
// of the step after it. Failures leave as panics, as an op's do (an
// out-of-memory error is a *memory.OOMError, which tensor.Step returns).
func (b *Base) acquire(g *baseGroup) {
	switch {
	case g.loading():
		if err := b.complete(g); err != nil {
			panic(&tensor.Error{Op: "offload base", Msg: err.Error()})
		}
	case g.kept:
		g.kept = false
	case !g.fetched:
		if err := b.fetch(g, false); err != nil {
			var te *tensor.Error
			if errors.As(err, &te) {
				panic(te)
			}
			panic(err) // *memory.OOMError, as an op's allocation
		}
		if err := b.complete(g); err != nil {
			panic(&tensor.Error{Op: "offload base", Msg: err.Error()})
		}
	default:
		return // already whole (a nested use)
	}
	b.advance(g)
}

// advance moves the pass along its trace with g's fetch (recording it
// where the pass departs from the trace) and prefetches the next; an
// evaluation prefetches the next block of the model.
func (b *Base) advance(g *baseGroup) {
	switch {
	case b.inPass:
		if b.pos < len(b.trace) && b.trace[b.pos] == g {
			b.pos++
		} else {
			b.trace = append(b.trace[:b.pos], g)
			b.pos++
			return // recording: nothing ahead is known
		}
		if b.pos < len(b.trace) {
			b.prefetch(b.trace[b.pos])
		}
	case b.eval:
		if g.index+1 < len(b.groups) {
			b.prefetch(b.groups[g.index+1])
		}
	}
}

// prefetch starts g's fetch unless g is on the device; a prefetch that
// does not fit in memory is not started (g is fetched when needed).
func (b *Base) prefetch(g *baseGroup) {
	if g.fetched {
		return
	}
	_ = b.fetch(g, true)
}

// nextIs reports whether the trace says g's fetch is the pass's next.
func (b *Base) nextIs(g *baseGroup) bool {
	return b.inPass && b.pos < len(b.trace) && b.trace[b.pos] == g
}

// release ends a use of g: its weights go home, unless the trace says g
// is fetched next (then they stay, kept, and that fetch is free).
func (b *Base) release(g *baseGroup) {
	if g.fetched && !g.loading() && b.nextIs(g) {
		g.kept = true
		b.stats.Kept++
		return
	}
	if err := b.park(g); err != nil {
		panic(&tensor.Error{Op: "offload base", Msg: err.Error()})
	}
}

// park frees g's weights on the device, completing a fetch in flight
// first (its memory is being written).
func (b *Base) park(g *baseGroup) error {
	if !g.fetched {
		return nil
	}
	var err error
	if g.loading() {
		err = b.complete(g)
	}
	if g.fetched {
		for _, w := range g.weights {
			err = errors.Join(err, w.Unfetch())
		}
	}
	g.fetched, g.kept = false, false
	return err
}

// BeforeForward starts a training pass: whatever the last pass left on
// the device goes home, and the first fetch the last pass's trace names
// starts. Call it before each forward, training or evaluating (an
// evaluation's runner leaves the pass).
func (b *Base) BeforeForward() error {
	err := b.Settle()
	b.inPass, b.pos = true, 0
	if len(b.trace) > 0 {
		b.prefetch(b.trace[0])
	}
	return err
}

// Settle ends a pass: it waits for the copies in flight and sends every
// block's weights home; afterwards no copy reads host memory. The first
// error is returned.
func (b *Base) Settle() error {
	b.inPass, b.eval = false, false
	var first error
	for _, g := range b.groups {
		if err := b.park(g); err != nil && first == nil {
			first = err
		}
	}
	if b.unsynced {
		b.unsynced = false
		synced := map[uploader]bool{}
		for _, g := range b.groups {
			if g.up != nil && !synced[g.up] {
				synced[g.up] = true
				if err := g.up.SyncUploads(); err != nil && first == nil {
					first = err
				}
			}
		}
	}
	return first
}

// FetchAll brings every block's weights to the device, runs fn (an
// export that reads the model through its device: LoRA's merged weights)
// and sends them home again: the whole base is on the device while fn
// runs.
func (b *Base) FetchAll(fn func() error) error {
	if err := b.Settle(); err != nil {
		return err
	}
	defer b.Settle()
	for _, g := range b.groups {
		if err := b.fetch(g, false); err != nil {
			return fmt.Errorf("offload: base: fetching %s: %w", g.name, err)
		}
		if err := b.complete(g); err != nil {
			return err
		}
	}
	return fn()
}

// Release waits for the copies in flight and sends every weight home.
// The weights' host memory is theirs (a parked storage owns its host
// copy): releasing the model frees it.
func (b *Base) Release() error { return b.Settle() }

// Runner returns inner (nil: nn.RunSequential) wrapped so that each
// block runs with its weights on the device (see Base), for the model's
// SetBlockRunner.
func (b *Base) Runner(inner nn.BlockRunner) nn.BlockRunner {
	if inner == nil {
		inner = nn.RunSequential
	}
	return func(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
		if !r.Grad() {
			// An evaluation: its fetches end with the forward, so the
			// trace (a training pass's) must not predict a backward from
			// them, nor be overwritten by them.
			b.inPass, b.eval = false, true
		} else {
			b.eval = false
		}
		wrapped := make([]nn.Module, len(blocks))
		for i, m := range blocks {
			if g := b.byMod[m]; g != nil {
				wrapped[i] = baseBlock{b: b, m: m, g: g}
			} else {
				wrapped[i] = m
			}
		}
		return inner(r, wrapped, x)
	}
}

// baseBlock runs a block of the model with its weights on the device.
type baseBlock struct {
	b *Base
	m nn.Module
	g *baseGroup
}

func (k baseBlock) Parameters() []*tensor.Tensor { return k.m.Parameters() }

func (k baseBlock) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	b, g := k.b, k.g
	b.acquire(g)
	rec := r.Grad()
	in := x
	if rec && x.RequiresGrad() {
		// Backward passes here once the block's backward has ended.
		in = r.OnBackward(x, "offload_base_block_end", func() { b.release(g) })
	}
	y := k.m.Forward(r, in)
	if in != x {
		in.Release()
	}
	b.release(g)
	if rec && y.RequiresGrad() {
		// Backward reaches the block here: its weights come back first.
		h := r.OnBackward(y, "offload_base_block_begin", func() { b.acquire(g) })
		y.Release()
		y = h
	}
	return y
}
