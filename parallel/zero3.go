package parallel

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// ZeRO3 shards the parameters themselves across the ranks (ZeRO stage 3;
// PyTorch's FSDP): every rank keeps 1/Size of every parameter, of its
// gradient and of its optimizer state, and holds a block's parameters
// whole only while the block runs.
//
// The parameters are cut into groups: one per block of the model
// (nn.Model's Blocks), and the root group, the parameters outside the
// blocks (a GPT's embeddings and final norm). A group's parameters are
// moved into one flat storage of Size·S elements (tensor.Flatten; each
// parameter starts at a multiple of the optimizer's ElementsPer, S a
// multiple of it too, as in ZeRO), and rank r keeps elements [r·S,
// (r+1)·S) in a shard of its own (memory.Parameter). The flat storage is
// evicted between uses, so the parameters stay the model's tensors but
// hold no memory.
//
// Runner wraps the model's block runner (a checkpoint policy, or
// nn.RunSequential). Around each block:
//   - forward: the group is all-gathered into its flat storage
//     (Rematerialize), the block runs, the storage is evicted;
//   - backward: an autograd node on the block's output gathers the group
//     again before the block's backward starts; a node on its input
//     (or, when the input needs no gradient, the parameters'
//     OnGradReady hooks) learns that it ended: the gradients of the group
//     are reduce-scattered (averaged) into this rank's shard gradient
//     (memory.Gradient, S elements, accumulated over micro-batches), the
//     full gradients released and the storage evicted again.
//
// A recomputed block (activation checkpointing) gathers for the
// recomputation, as for its first forward. The root group is gathered
// by BeforeForward (the trainer calls it before each forward), evicted
// while the blocks run, gathered again after them (a GPT's head and final
// norm) and, in backward, reduced and evicted when the backward reaches
// the blocks' output; what the root receives later (the embeddings'
// gradients) is reduced when its parameters report their gradients
// complete, and before that the root is gathered again once the blocks'
// backward ends, for layers before the blocks whose backward reads their
// weights.
//
// Per rank, with P parameters and Adam (4 bytes parameters, 4 gradients,
// 8 state): 16·P/Size for the shards, plus the group being run: its
// parameters whole (4·B bytes for a block of B parameters) and, in
// backward, their gradients (4·B) until the group is reduced.
//
// Prefetching (ZeRO3Config.Prefetch, over an Async communicator): each
// training pass (from BeforeForward to the end of its backward) gathers
// the groups in an order fixed by the graph, which ZeRO3 records as the
// pass's trace, as DeepSpeed traces its modules. (A forward without
// gradients, an evaluation, neither follows nor changes the trace; its
// groups are gathered when needed, but for the first block's, started by
// BeforeForward's gather of the root.) From the next pass on,
// when a group is gathered, the gather of the group the trace says comes
// next is started at once and runs while the current group computes: in
// forward the next block, in backward the block before, and the first
// block of the backward while the head runs. A pass that departs from
// the trace (an evaluation after training, a changed graph) is recorded
// anew from where it departed, with no prefetch until then: a wrong
// trace costs time and memory, never correctness. The trace also saves
// gathers without an asynchronous engine: a group whose next gather is
// the very next one (a checkpointed block's recomputation, right before
// its backward) is kept whole instead of evicted and gathered again.
//
// A prefetched group's parameters exist one group earlier than they are
// used, so the price of prefetching is one group's parameters more at
// the peak (in backward: the running block's parameters and gradients
// and the next block's parameters). Its allocation is made when the
// gather starts, on the training goroutine, so plans stay exact; a
// prefetch that does not fit in memory is not started, and the gather
// happens when the group is needed, as without prefetching.
//
// Every rank must run the same graph (the same model, batch shapes,
// checkpoint policy and frozen parameters), since the hooks issue the
// collectives in the order the graph reaches them, and the traces (and
// so the prefetches) are then the same on every rank.
type ZeRO3 struct {
	comm   Comm
	dev    device.Device
	groups []*group3 // blocks, then the root group (if any)
	root   *group3
	byMod  map[nn.Module]*group3
	opt    *optim.Optimizer
	views  []*tensor.Tensor // the optimizer's parameters: owned pieces of the shards
	viewOf []piece3
	local  int // Σ S over the groups: a rank's elements
	chunk  int // elements per rank of a host gather (checkpoints)
	err    error
	// lookups is ZeRO3Config.LookupsBeforeBlocks.
	lookups bool
	// async is the communicator prefetches start on (nil: none).
	async *Async
	// trace is the order of the last pass's gathers, pos the position
	// in it of the current pass's next gather; inPass is set from
	// BeforeForward until the pass's groups are settled.
	trace  []*group3
	pos    int
	inPass bool
	// Gathers counts the all-gathers of groups since construction, and
	// Reductions their reduce-scatters; GatherTime and ReduceTime are the
	// wall time the collectives took (packing included). GatherWait is
	// the part of GatherTime the training goroutine spent waiting: all of
	// it without prefetching; GatherTime - GatherWait is what prefetching
	// hid behind computation. Prefetches counts the gathers started
	// ahead, and Kept the gathers saved by keeping a group whole.
	Gathers, Reductions    int
	GatherTime, ReduceTime time.Duration
	GatherWait             time.Duration
	Prefetches, Kept       int
}

// group3 is one group of parameters sharded together.
type group3 struct {
	name     string
	f        *flat // the group's layout; f.params are its parameters
	trainIdx []int // the parameters that require grad
	S        int   // elements per rank
	base     int   // the group's first element in a rank's local vector
	full     *tensor.Tensor
	shard    *tensor.Tensor
	grad     *tensor.Tensor // reduced gradient of the shard, nil when none yet
	had      []bool         // per parameter: a gradient was reduced this step
	viaInput bool           // this pass's backward of the group ends at its input node
	fired    int            // trainable parameters complete in this pass
	// A prefetch in flight: the gather's request, and the storage's
	// completion (tensor.RematerializeLater).
	req  *Request
	done func(error) error
	// kept: whole although its use ended, because the trace says its
	// next gather is the next of the pass.
	kept bool
}

// piece3 is one owned piece of a parameter: elements [a, a+n) of group
// g's parameter i, at position pos of the group's flat layout.
type piece3 struct {
	g   *group3
	seg segment
}

// ZeRO3Config configures NewZeRO3.
type ZeRO3Config struct {
	// BucketBytes bounds the host staging of ExportFull's gathers (0:
	// DefaultBucketBytes).
	BucketBytes int64
	// LookupsBeforeBlocks says that the layers run before the blocks
	// read none of the root group's weights in backward (a GPT's token
	// and position embeddings: lookups and a sum), so the root is not
	// gathered again once the blocks' backward ends: one gather of the
	// root per micro-batch fewer, and for GPT-2 the token embedding is
	// the largest group. Set wrongly, the backward fails with an error
	// naming the evicted parameter; it never reads freed memory.
	LookupsBeforeBlocks bool
	// Prefetch starts each group's gather while the group before it in
	// the pass computes (see ZeRO3). The communicator must be an *Async
	// (NewAsync) through which every collective of the rank goes.
	Prefetch bool
}

// NewZeRO3 shards model's parameters (F32, on one device, the same model
// on every rank) across c's ranks, one group at a time, broadcasting rank
// 0's values, and builds this rank's optimizer over its pieces of the
// trainable ones with newOptimizer, as NewZeRO does. Parameters made
// deferred (tensor.Deferred: a model built with nn.Builder.Defer) are
// drawn as their group is flattened, so a rank never holds more than one
// group whole, even while the model is sharded. Afterwards the
// parameters hold no memory until Runner's blocks (or BeforeForward,
// GatherAll) gather them; install the runner with
// model.SetBlockRunner(z.Runner(policy)). Parameters must not be frozen
// or unfrozen afterwards.
func NewZeRO3(c Comm, model nn.Model, cfg ZeRO3Config, newOptimizer func(shard []*tensor.Tensor) (*optim.Optimizer, error)) (*ZeRO3, error) {
	if c == nil {
		return nil, errors.New("dist: zero3: nil communicator")
	}
	if newOptimizer == nil {
		return nil, errors.New("dist: zero3: nil optimizer constructor")
	}
	params := model.Parameters()
	dev, err := checkParams("zero3", params)
	if err != nil {
		return nil, err
	}
	for _, p := range params {
		// The groups' flat storage and shards are F32 (stages 1 and 2
		// take BF16 parameters).
		if err := checkF32("zero3", "parameter "+nameOf(p), p); err != nil {
			return nil, fmt.Errorf("%w (stage 3 shards f32 parameters only; use -zero 1 or 2 with -weights bf16)", err)
		}
	}
	align, err := stateAlignment(newOptimizer)
	if err != nil {
		return nil, err
	}
	if align == 0 {
		// Stages 1 and 2 give each rank whole parameters
		// (shardLayout); a group's shards here are cut by ranges.
		return nil, errors.New("dist: zero3: the optimizer updates each parameter whole (Adafactor), and stage 3 cuts parameters by element ranges; use -zero 1 or 2")
	}
	n, r := c.Size(), c.Rank()
	z := &ZeRO3{comm: c, dev: dev, byMod: map[nn.Module]*group3{}, lookups: cfg.LookupsBeforeBlocks}
	if cfg.Prefetch {
		a, ok := c.(*Async)
		if !ok {
			return nil, fmt.Errorf("dist: zero3: prefetching needs an asynchronous communicator (parallel.NewAsync) through which every collective of the rank goes, not %T", c)
		}
		z.async = a
	}
	z.chunk = max(bucketElems(cfg.BucketBytes)/n, 1)
	inBlock := map[*tensor.Tensor]bool{}
	for i, b := range model.Blocks() {
		ps := b.Parameters()
		if len(ps) == 0 {
			continue
		}
		g := &group3{name: fmt.Sprintf("block %d", i), f: newFlatAligned(ps, align)}
		for _, p := range ps {
			if inBlock[p] {
				return nil, fmt.Errorf("dist: zero3: parameter %s belongs to two blocks", nameOf(p))
			}
			inBlock[p] = true
		}
		z.groups = append(z.groups, g)
		z.byMod[b] = g
	}
	var rest []*tensor.Tensor
	for _, p := range params {
		if !inBlock[p] {
			rest = append(rest, p)
		}
	}
	if len(rest) > 0 {
		z.root = &group3{name: "root (parameters outside the blocks)", f: newFlatAligned(rest, align)}
		z.groups = append(z.groups, z.root)
	}
	fail := func(err error) (*ZeRO3, error) {
		z.Release()
		return nil, fmt.Errorf("dist: zero3: %w", err)
	}
	for _, g := range z.groups {
		g.S = roundUp((g.f.total+n-1)/n, align)
		g.base = z.local
		z.local += g.S
		g.had = make([]bool, len(g.f.params))
		for i, p := range g.f.params {
			if p.RequiresGrad() {
				g.trainIdx = append(g.trainIdx, i)
			}
		}
		// One group whole at a time: a model built deferred
		// (nn.Builder.Defer) is drawn here, so it never exists whole
		// on a rank. Rank 0's values are every rank's.
		if g.full, err = tensor.Flatten(g.f.params, g.f.off, n*g.S, memory.Parameter); err != nil {
			return fail(err)
		}
		g.full.SetName(g.name)
		if err := broadcastFlat(c, dev, newFlat(g.f.params), z.chunk*n, 0); err != nil {
			return fail(err)
		}
		if g.shard, err = tensor.New(dev, tensor.F32, []int{g.S}, memory.Parameter); err != nil {
			return fail(err)
		}
		err = tensor.Catch(func() error {
			s := tempScope()
			defer s.Close()
			assign(s, g.shard, s.Narrow(g.full, 0, r*g.S, g.S))
			return nil
		})
		if err == nil {
			err = g.full.Evict()
		}
		if err != nil {
			return fail(err)
		}
	}
	err = tensor.Catch(func() error {
		s := tensor.NewScope(tensor.NoGrad())
		defer s.Close()
		for _, g := range z.groups {
			for _, sg := range g.f.segments(r*g.S, (r+1)*g.S) {
				p := g.f.params[sg.i]
				if !p.RequiresGrad() {
					continue
				}
				v := s.Keep(s.Narrow(g.shard, 0, sg.pos-r*g.S, sg.n))
				v.SetName(fmt.Sprintf("%s[%d:%d]", nameOf(p), sg.a, sg.a+sg.n))
				v.SetRequiresGrad(true)
				z.views = append(z.views, v)
				z.viewOf = append(z.viewOf, piece3{g: g, seg: sg})
			}
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if z.opt, err = newOptimizer(append([]*tensor.Tensor(nil), z.views...)); err != nil {
		z.opt = nil
		return fail(fmt.Errorf("building the shard optimizer: %w", err))
	}
	if z.opt == nil {
		return fail(errors.New("the optimizer constructor returned nil"))
	}
	for _, g := range z.groups {
		for _, i := range g.trainIdx {
			g.f.params[i].OnGradReady(func(*tensor.Tensor) { z.gradReady(g) })
		}
	}
	return z, nil
}

// Optimizer is this rank's shard optimizer.
func (z *ZeRO3) Optimizer() *optim.Optimizer { return z.opt }

// Shard returns the owned pieces of the trainable parameters (the
// optimizer's parameters); between ReduceGradients and Update their Grad
// is the averaged gradient.
func (z *ZeRO3) Shard() []*tensor.Tensor { return z.views }

// Err is the first failure of a gather or a reduction, wherever it was
// met: inside a forward or backward it surfaces as a *tensor.Error panic
// (which tensor.Step returns) that only quotes it, while Err keeps the
// error itself, wrapping a *RankError that names the rank at fault.
func (z *ZeRO3) Err() error { return z.err }

// fail records err and panics with it as a *tensor.Error, the way an
// error leaves a forward or backward pass.
func (z *ZeRO3) fail(err error) {
	if z.err == nil {
		z.err = err
	}
	panic(&tensor.Error{Op: "zero3", Msg: err.Error()})
}

// gather makes g's parameters whole (a no-op when they are): it waits
// for a prefetch in flight, takes a kept group as it is, or gathers. In a
// pass, each of these is the next step of the trace, and starts the
// prefetch of the step after it.
func (z *ZeRO3) gather(g *group3) error {
	switch {
	case g.req != nil:
		if err := z.await(g); err != nil {
			return err
		}
	case g.kept:
		g.kept = false
	case g.full.Evicted():
		start := time.Now()
		err := g.full.Rematerialize(func() error {
			return tensor.Catch(func() error { return z.comm.AllGather(g.full, g.shard) })
		})
		d := time.Since(start)
		z.GatherTime += d
		z.GatherWait += d
		if err != nil {
			return z.gatherFailed(g, err)
		}
		z.Gathers++
	default:
		return nil
	}
	z.advance(g)
	return nil
}

// await completes g's prefetch: it waits for the gather (the wait is the
// training goroutine's) and hands the storage its values or evicts it.
func (z *ZeRO3) await(g *group3) error {
	start := time.Now()
	err := g.req.Wait()
	z.GatherWait += time.Since(start)
	z.GatherTime += g.req.Ran
	err = g.done(err)
	g.req, g.done = nil, nil
	if err != nil {
		return z.gatherFailed(g, err)
	}
	z.Gathers++
	return nil
}

func (z *ZeRO3) gatherFailed(g *group3, err error) error {
	err = fmt.Errorf("dist: zero3: gathering %s: %w", g.name, err)
	if z.err == nil {
		z.err = err
	}
	return err
}

// advance moves the pass along its trace with g's gather (recording it
// where the pass departs from the trace) and prefetches the next.
func (z *ZeRO3) advance(g *group3) {
	if !z.inPass {
		return
	}
	if z.pos < len(z.trace) && z.trace[z.pos] == g {
		z.pos++
	} else {
		z.trace = append(z.trace[:z.pos], g)
		z.pos++
		return // recording: nothing ahead is known
	}
	if z.async == nil || z.pos >= len(z.trace) {
		return
	}
	next := z.trace[z.pos]
	if next.req != nil || !next.full.Evicted() {
		return
	}
	done, err := next.full.RematerializeLater()
	if err != nil {
		return // no room ahead of time: gathered when needed
	}
	next.done = done
	next.req = z.async.StartAllGather(next.full, next.shard)
	z.Prefetches++
}

// nextIs reports whether the trace says g's gather is the pass's next.
func (z *ZeRO3) nextIs(g *group3) bool {
	return z.inPass && z.pos < len(z.trace) && z.trace[z.pos] == g
}

// drop evicts g, completing a prefetch in flight first (its storage is
// being written).
func (z *ZeRO3) drop(g *group3) error {
	if g.full == nil {
		return nil // NewZeRO3 failed before making it
	}
	var err error
	if g.req != nil {
		err = z.await(g)
	}
	g.kept = false
	return errors.Join(err, g.full.Evict())
}

// settle ends the pass: it waits for what is in flight and evicts every
// group. The first error of a prefetch is returned.
func (z *ZeRO3) settle() error {
	z.inPass = false
	var first error
	for _, g := range z.groups {
		if err := z.drop(g); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (z *ZeRO3) mustGather(g *group3) {
	if err := z.gather(g); err != nil {
		z.fail(err)
	}
}

// evict ends a use of g: its storage is freed, unless the trace says g
// is gathered next (then it stays whole, kept, and that gather is free).
func (z *ZeRO3) evict(g *group3) {
	if z.nextIs(g) && !g.full.Evicted() && g.req == nil {
		g.kept = true
		z.Kept++
		return
	}
	if err := z.drop(g); err != nil {
		z.fail(err)
	}
}

// reduce reduce-scatters the gradients g's parameters hold (none: zeros)
// into g.grad, averaged over the ranks, and releases them.
func (z *ZeRO3) reduce(g *group3) error {
	start := time.Now()
	defer func() { z.ReduceTime += time.Since(start) }()
	n := z.comm.Size()
	err := tensor.Catch(func() error {
		in, err := tensor.New(z.dev, tensor.F32, []int{n * g.S}, memory.Temporary)
		if err != nil {
			return err
		}
		defer in.Release()
		s := tempScope()
		defer s.Close()
		// Each full gradient is released as soon as it is packed, so
		// Gradient falls while the bucket (memory.Temporary, the
		// group's size) fills.
		for _, i := range g.trainIdx {
			p := g.f.params[i]
			d := s.Narrow(in, 0, g.f.off[i], p.Len())
			if gr := p.Grad(); gr != nil {
				v := s.Reshape(gr, p.Len())
				assign(s, d, v)
				v.Release()
				g.had[i] = true
				p.SetGrad(nil)
			} else {
				d.Fill(0)
			}
			d.Release()
		}
		out, err := tensor.New(z.dev, tensor.F32, []int{g.S}, memory.Temporary)
		if err != nil {
			return err
		}
		defer out.Release()
		if err := z.comm.ReduceScatter(out, in, Avg); err != nil {
			return err
		}
		if g.grad == nil {
			if g.grad, err = tensor.New(z.dev, tensor.F32, []int{g.S}, memory.Gradient); err != nil {
				return err
			}
		}
		s.AddInPlace(g.grad, out).Release()
		return nil
	})
	if err != nil {
		err = fmt.Errorf("dist: zero3: reducing the gradients of %s: %w", g.name, err)
		if z.err == nil {
			z.err = err
		}
		return err
	}
	z.Reductions++
	return nil
}

// finish ends the backward of g: its gradients are reduced and its
// parameters evicted.
func (z *ZeRO3) finish(g *group3) {
	g.fired = 0
	if len(g.trainIdx) > 0 {
		if err := z.reduce(g); err != nil {
			z.fail(err)
		}
	}
	z.evict(g)
}

// gradReady is the OnGradReady hook of g's trainable parameters. Where
// no input node ends the group (the root; a block whose input needs no
// gradient), the last of them to report does: no node of the pass writes
// their gradients or reads their weights after that. For a GPT's root
// that is the embeddings' gradients, at the very end of backward.
func (z *ZeRO3) gradReady(g *group3) {
	g.fired++
	if g.fired < len(g.trainIdx) || g.viaInput {
		return
	}
	z.finish(g)
}

// block runs a block of the model between the gathers of its group.
type block3 struct {
	z *ZeRO3
	m nn.Module
	g *group3
}

func (b block3) Parameters() []*tensor.Tensor { return b.m.Parameters() }

func (b block3) Forward(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
	z, g := b.z, b.g
	z.mustGather(g)
	rec := r.Grad()
	in := x
	if rec {
		// The pass that will run backward: reset the group's count.
		g.fired, g.viaInput = 0, x.RequiresGrad()
		if g.viaInput {
			in = r.OnBackward(x, "zero3_block_end", func() { z.finish(g) })
		}
	}
	y := b.m.Forward(r, in)
	if in != x {
		in.Release()
	}
	z.evict(g)
	if rec && y.RequiresGrad() {
		h := r.OnBackward(y, "zero3_block_begin", func() { g.fired = 0; z.mustGather(g) })
		y.Release()
		y = h
	}
	return y
}

// Runner returns inner (nil: nn.RunSequential) wrapped so that each
// block runs between the gathers of its parameters (see ZeRO3), for the
// model's SetBlockRunner.
func (z *ZeRO3) Runner(inner nn.BlockRunner) nn.BlockRunner {
	if inner == nil {
		inner = nn.RunSequential
	}
	return func(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
		wrapped := make([]nn.Module, len(blocks))
		for i, b := range blocks {
			if g := z.byMod[b]; g != nil {
				wrapped[i] = block3{z: z, m: b, g: g}
			} else {
				wrapped[i] = b
			}
		}
		root := z.root
		rec := r.Grad()
		if !rec {
			// An evaluation: its gathers end with the forward, so the
			// trace (a training pass's) must not predict a backward
			// from them, nor be overwritten by them.
			z.inPass = false
		}
		in := x
		if root != nil {
			z.evict(root)
			if rec && x.RequiresGrad() && !z.lookups {
				// Layers before the blocks may read their weights in
				// backward: gather the root when the blocks' backward
				// has ended.
				in = r.OnBackward(x, "zero3_root_in", func() { z.mustGather(root) })
			}
		}
		y := inner(r, wrapped, in)
		if in != x {
			in.Release()
		}
		if root != nil {
			z.mustGather(root)
			if rec && y.RequiresGrad() {
				// Backward reaches the blocks' output once the layers
				// after them (head, final norm) are done: reduce what
				// they gave the root and drop it while the blocks run.
				h := r.OnBackward(y, "zero3_root_out", func() {
					if len(root.trainIdx) > 0 {
						if err := z.reduce(root); err != nil {
							z.fail(err)
						}
					}
					z.evict(root)
				})
				y.Release()
				y = h
			}
		}
		return y
	}
}

// BeforeForward gathers the root group (the parameters outside the
// blocks, which a model uses before its blocks run): call it before each
// forward, training or evaluating. A collective.
func (z *ZeRO3) BeforeForward() error {
	if err := z.settle(); err != nil {
		return err
	}
	z.inPass, z.pos = true, 0
	if z.root == nil {
		return nil
	}
	z.root.fired = 0
	return z.gather(z.root)
}

// ReduceGradients ends the step's backward passes: it reduces what any
// group still holds and evicts every group, then agrees with the other
// ranks on which parameters received a gradient at all (the others'
// pieces get none and are not stepped) and hands each owned piece its
// averaged gradient (Shard's Grad).
func (z *ZeRO3) ReduceGradients() error {
	if z.err != nil {
		return z.err
	}
	if err := z.settle(); err != nil { // every group evicted
		return err
	}
	for _, g := range z.groups {
		pending := false
		for _, i := range g.trainIdx {
			pending = pending || g.f.params[i].Grad() != nil
		}
		if pending {
			if err := z.reduce(g); err != nil {
				return err
			}
		}
		g.fired = 0
	}
	// What each rank lacks, reduced by Min (see syncPresence: a plan's
	// collectives return zeros, which read as present everywhere).
	var missing []float32
	for _, g := range z.groups {
		for _, h := range g.had {
			missing = append(missing, b2f(!h))
		}
	}
	missing, err := allReduceHost(z.comm, z.dev, missing, Min)
	if err != nil {
		return fmt.Errorf("dist: zero3: %w", err)
	}
	at := map[*group3]int{}
	k := 0
	for _, g := range z.groups {
		at[g] = k
		k += len(g.had)
	}
	r := z.comm.Rank()
	return tensor.Catch(func() error {
		s := tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Gradient))
		defer s.Close()
		for j, v := range z.views {
			pc := z.viewOf[j]
			if pc.g.grad == nil || missing[at[pc.g]+pc.seg.i] != 0 {
				v.SetGrad(nil)
				continue
			}
			v.SetGrad(s.Keep(s.Narrow(pc.g.grad, 0, pc.seg.pos-r*pc.g.S, pc.seg.n)))
		}
		return nil
	})
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// Step is ReduceGradients then Update.
func (z *ZeRO3) Step() error {
	if err := z.ReduceGradients(); err != nil {
		return err
	}
	return z.Update()
}

// Update steps the shard optimizer and releases the gradients. If the
// step fails on any rank, every rank returns an error naming the ranks
// that failed. Nothing is gathered: each group is gathered when next used.
func (z *ZeRO3) Update() error { return z.UpdateScaled(1) }

// UpdateScaled is Update with gradients multiplied by gradScale.
func (z *ZeRO3) UpdateScaled(gradScale float64) error {
	stepErr := z.opt.StepScaled(gradScale)
	z.ZeroGrad()
	n, r := z.comm.Size(), z.comm.Rank()
	status := make([]float32, n)
	if stepErr != nil {
		status[r] = 1
	}
	status, err := allReduceHost(z.comm, z.dev, status, Sum)
	if err != nil {
		return fmt.Errorf("dist: zero3: %w", err)
	}
	if stepErr != nil {
		return fmt.Errorf("dist: zero3: rank %d: %w", r, stepErr)
	}
	for q, v := range status {
		if v != 0 {
			return fmt.Errorf("dist: zero3: the optimizer step failed on rank %d", q)
		}
	}
	return nil
}

// ZeroGrad releases every gradient — the shard gradients and whatever a
// failed pass left in the parameters — and evicts every group a failed
// pass left gathered (after an update its values would be stale). Call
// it after each step, taken or skipped.
func (z *ZeRO3) ZeroGrad() {
	for _, v := range z.views {
		v.SetGrad(nil)
	}
	z.Evict()
	for _, g := range z.groups {
		if g.grad != nil {
			g.grad.Release()
			g.grad = nil
		}
		clear(g.had)
		g.fired = 0
		for _, p := range g.f.params {
			p.SetGrad(nil)
		}
	}
}

// GradNorm is the global L2 norm of the averaged gradients, valid
// between ReduceGradients and Update (a collective).
func (z *ZeRO3) GradNorm() (float64, error) {
	local, err := optim.GradNorm(z.views)
	if err != nil {
		return 0, err
	}
	v, err := allReduceHost(z.comm, z.dev, []float32{float32(local * local)}, Sum)
	if err != nil {
		return 0, err
	}
	return math.Sqrt(float64(v[0])), nil
}

// ClipGradNorm scales the shard gradients so that the global norm is at
// most maxNorm and returns the norm they had.
func (z *ZeRO3) ClipGradNorm(maxNorm float64) (float64, error) {
	var grads []*tensor.Tensor
	for _, g := range z.groups {
		if g.grad != nil {
			grads = append(grads, g.grad)
		}
	}
	return clipToNorm("zero3", maxNorm, z.GradNorm, grads)
}

// GatherAll makes every parameter whole, runs fn (saving a checkpoint,
// exporting weights, generating text) and evicts them again: the whole
// model exists on every rank while fn runs. A collective.
func (z *ZeRO3) GatherAll(fn func() error) error {
	if err := z.settle(); err != nil {
		return err
	}
	defer func() {
		for _, g := range z.groups {
			_ = g.full.Evict()
		}
	}()
	for _, g := range z.groups {
		if err := z.gather(g); err != nil {
			return err
		}
	}
	return fn()
}

// Evict frees every group left gathered: after an evaluation, whose
// forwards end with the root group whole (the head needs it), or a
// prefetch it started for a backward that did not come. It waits for
// prefetches in flight; their errors are Err's.
func (z *ZeRO3) Evict() {
	_ = z.settle()
}

// GatherEach makes each group's parameters whole in turn, calls fn with
// them, and evicts them before the next group: what a checkpoint needs
// with one group whole at a time on the device. A collective.
func (z *ZeRO3) GatherEach(fn func(params []*tensor.Tensor) error) error {
	if err := z.settle(); err != nil {
		return err
	}
	for _, g := range z.groups {
		if err := z.gather(g); err != nil {
			return err
		}
		err := fn(g.f.params)
		_ = g.full.Evict() // made by Flatten: cannot fail
		if err != nil {
			return err
		}
	}
	return nil
}

// LoadFull sets the parameters from whole-model values (a checkpoint):
// values returns the elements of a parameter, by name, in row-major
// order, or nil to keep the parameter as it is (a LoRA checkpoint holds
// the adapters, not the base). Each rank writes its shards; not a
// collective.
func (z *ZeRO3) LoadFull(values func(p *tensor.Tensor) []float32) error {
	if err := z.settle(); err != nil {
		return err
	}
	r := z.comm.Rank()
	for _, g := range z.groups {
		var host []float32
		for _, sg := range g.f.segments(r*g.S, (r+1)*g.S) {
			p := g.f.params[sg.i]
			v := values(p)
			if v == nil {
				continue
			}
			if host == nil {
				host = g.shard.Float32s()
			}
			if len(v) != p.Len() {
				return fmt.Errorf("dist: zero3: %d values for %s", len(v), nameOf(p))
			}
			copy(host[sg.pos-r*g.S:], v[sg.a:sg.a+sg.n])
		}
		if err := g.full.Evict(); err != nil {
			return err
		}
		if host == nil {
			continue // nothing of this group in the checkpoint
		}
		if err := g.shard.SetFloat32s(host); err != nil {
			return err
		}
	}
	return nil
}

// Release frees the shards, the optimizer and the gradients. The
// parameters stay evicted: release them as usual (the model's).
func (z *ZeRO3) Release() {
	_ = z.settle()
	if z.opt != nil {
		z.opt.Release()
		z.opt = nil
	}
	for _, v := range z.views {
		v.Release()
	}
	z.views, z.viewOf = nil, nil
	for _, g := range z.groups {
		if g.grad != nil {
			g.grad.Release()
			g.grad = nil
		}
		if g.shard != nil {
			g.shard.Release()
		}
		for _, i := range g.trainIdx {
			g.f.params[i].OnGradReady(nil)
		}
		if g.full != nil {
			_ = g.full.Evict()
			g.full.Release()
		}
	}
	z.groups = nil
}

// allReduceHost reduces a host vector over c's ranks through a device
// tensor (memory.Temporary).
func allReduceHost(c Comm, dev device.Device, v []float32, op Op) ([]float32, error) {
	t, err := tensor.FromFloat32(dev, v, []int{len(v)}, memory.Temporary)
	if err != nil {
		return nil, err
	}
	defer t.Release()
	if err := c.AllReduce(t, op); err != nil {
		return nil, err
	}
	return t.Float32s(), nil
}

// Rank is this rank's number.
func (z *ZeRO3) Rank() int { return z.comm.Rank() }
