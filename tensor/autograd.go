package tensor

import (
	"slices"
	"sync/atomic"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// backwardCalls counts Backward calls in the process, so that code can
// tell whether a backward pass happened between two points.
var backwardCalls atomic.Int64

// BackwardCalls is the number of Backward calls made so far.
func BackwardCalls() int64 { return backwardCalls.Load() }

// node is one recorded op: how to turn the gradient of its output into
// gradients of its inputs, and what it saved to do so. Nodes are
// reference-counted by the tensors they produced and by the nodes that
// consumed those tensors, so releasing the last tensor of a graph that will
// never see backward frees everything it saved.
type node struct {
	op       string
	edges    []edge
	saved    []*Tensor
	versions []int64 // storage version of each saved tensor when saved
	// savedSt is the storage each saved tensor was taken from: the
	// version check reads it even when a SavedHooks packed the tensor
	// away and the node holds no reference to that storage.
	savedSt []*storage
	// packed holds, where a scope's SavedHooks packed saved tensor i,
	// its packed form; saved[i] is then nil except while the node runs
	// in backward (unpack puts a handle there, freeSaved or
	// dropUnpacked takes it away).
	packed   []Packed
	backward func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor
	// addInto, where set, adds the gradient backward would pass to the
	// node's single input straight into dst, a gradient already
	// accumulated for that input. Ops whose input gradient is zero but
	// for a region (narrow) set it, so that k slices of one tensor cost
	// one full-size gradient, not k of them added together.
	addInto func(dst, g *Tensor)
	refs    int32
	freed   bool // saved tensors already released by a backward pass
}

// edge leads from a node to one of its inputs: the node that produced it,
// or the leaf itself. Neither is set when the input needs no gradient.
type edge struct {
	node  *node
	leaf  *Tensor
	dtype DType
	shape []int
}

func (n *node) retain() { n.refs++ }

func (n *node) release() {
	n.refs--
	if n.refs > 0 {
		return
	}
	n.freeSaved()
	for _, e := range n.edges {
		if e.node != nil {
			e.node.release()
		}
	}
	n.edges = nil
}

func (n *node) freeSaved() {
	if len(n.saved) == 0 {
		// Nothing to free: the node stays usable, as a cast of a weight
		// reused by several micro-batches must be.
		return
	}
	for _, t := range n.saved {
		t.Release()
	}
	for _, p := range n.packed {
		if p != nil {
			p.Release()
		}
	}
	n.saved = nil
	n.packed = nil
	n.savedSt = nil
	n.backward = nil
	n.freed = true
}

// needsGrad reports whether gradients must flow into t.
func (t *Tensor) needsGrad() bool { return t.requiresGrad || t.node != nil }

// RequiresGrad reports whether t is a leaf that wants a gradient or the
// result of recorded ops on one.
func (t *Tensor) RequiresGrad() bool { return t.needsGrad() }

// IsLeaf reports whether t was made directly rather than by a recorded
// op (it has no graph behind it).
func (t *Tensor) IsLeaf() bool { return t.node == nil }

// SetRequiresGrad marks a leaf tensor (one made directly, not by a
// recorded op) as wanting a gradient in backward.
func (t *Tensor) SetRequiresGrad(on bool) *Tensor {
	if t.node != nil {
		panic(errorf("SetRequiresGrad", "%s is the result of an op; only leaves can be marked (Detach it first)", t.describe()))
	}
	if on && t.dtype.IsQuantized() {
		panic(errorf("SetRequiresGrad", "%s is a quantized frozen weight: it has no gradient (ConvertTo a float dtype to train it)", t.describe()))
	}
	t.requiresGrad = on
	return t
}

// Grad is the gradient accumulated into a leaf by backward, or nil.
func (t *Tensor) Grad() *Tensor { return t.grad }

// SetGrad replaces a leaf's gradient (the tensor takes ownership of g;
// nil releases the old one: set-to-none).
func (t *Tensor) SetGrad(g *Tensor) {
	if t.grad != nil && t.grad != g {
		t.grad.Release()
	}
	t.grad = g
}

// OnGradReady sets fn (nil: none) to be called during every backward pass
// that reaches this leaf, once the pass has added its last contribution
// to the leaf's Grad: the moment a data-parallel engine can start
// reducing the gradient and, having taken what it needs, release it. fn
// runs on backward's goroutine, between nodes; it may read, replace or
// release the gradient (no later node of the pass writes it) but must not
// start another backward of the same graph. A leaf reached by a nested
// pass (the recomputation of a checkpointed segment) is complete per pass
// that adds to its gradient: a parameter used only inside such a segment
// gets its one call from the nested pass, one used both inside and outside
// gets one from each.
func (t *Tensor) OnGradReady(fn func(leaf *Tensor)) *Tensor {
	if t.node != nil {
		panic(errorf("OnGradReady", "%s is the result of an op; only leaves have gradients", t.describe()))
	}
	t.gradReady = fn
	return t
}

// Detach returns a new handle on the same elements with no history.
func (s *Scope) Detach(t *Tensor) *Tensor {
	t.mustLive("Detach")
	d := t.share()
	track(d)
	return s.own(d)
}

// record attaches a node to out when s records and some input needs a
// gradient. save lists tensors backward reads; they are retained (their
// storage outlives the caller's handles) and released after backward.
func (s *Scope) record(out *Tensor, op string, inputs []*Tensor, save []*Tensor, bw func(s *Scope, g *Tensor, saved []*Tensor) []*Tensor) {
	if !s.grad {
		return
	}
	any := false
	for _, in := range inputs {
		if in != nil && in.needsGrad() {
			any = true
			break
		}
	}
	if !any {
		return
	}
	n := &node{op: op, backward: bw, refs: 1}
	n.edges = make([]edge, len(inputs))
	for i, in := range inputs {
		if in == nil {
			continue
		}
		e := edge{dtype: in.dtype, shape: in.shape}
		switch {
		case in.node != nil:
			e.node = in.node
			in.node.retain()
		case in.requiresGrad:
			e.leaf = in
		}
		n.edges[i] = e
	}
	n.save(s.hooks, save)
	out.node = n
}

// checkSaved panics when a saved tensor was modified in place after it was
// saved: the gradient would silently be wrong.
func (n *node) checkSaved() {
	if n.freed {
		panic(errorf("backward", "%s: trying to backward through the graph a second time (its saved tensors were freed; pass RetainGraph to the first Backward)", n.op))
	}
	for i, st := range n.savedSt {
		if v := st.version.Load(); v != n.versions[i] {
			what := "packed by a SavedHooks"
			if t := n.saved[i]; t != nil {
				what = t.describe()
			}
			panic(errorf("backward", "%s: saved tensor %d (%s) was modified by an in-place operation after it was saved (version %d, now %d)", n.op, i, what, n.versions[i], v))
		}
	}
}

// BackwardOption configures a backward pass.
type BackwardOption func(*backwardConfig)

type backwardConfig struct {
	retain bool
	grad   *Tensor
	taken  bool // grad is handed over: released once the root's node has run
}

// RetainGraph keeps saved tensors so that backward can run again.
func RetainGraph() BackwardOption { return func(c *backwardConfig) { c.retain = true } }

// WithGrad starts backward from g instead of ones (for non-scalar roots).
func WithGrad(g *Tensor) BackwardOption { return func(c *backwardConfig) { c.grad = g } }

// WithGradTaken is WithGrad handing g over: backward releases the handle
// g as soon as the root's node has run, instead of the caller after
// Backward returns, so that its memory goes as soon as the nodes below
// have what they need of it. A backward function (Function) that runs a
// nested Backward with the gradient it was given — checkpointing's
// recomputed segment, a tiled block's graph — frees that gradient early
// so; the engine's own release of the handle afterwards does nothing, as
// Release is idempotent.
func WithGradTaken(g *Tensor) BackwardOption {
	return func(c *backwardConfig) { c.grad, c.taken = g, true }
}

// Backward computes the gradient of t with respect to every leaf that
// requires one and adds it into the leaf's Grad (allocated as
// memory.Gradient on first use). Each node's saved tensors are released as
// soon as the node has run, unless RetainGraph is given.
func (t *Tensor) Backward(opts ...BackwardOption) {
	t.mustLive("Backward")
	t.root().backward(opts)
}

// Root is what backward needs of a tensor whose values nothing reads any
// more: the node that made it, its shape and dtype. It holds the graph
// behind the tensor, not the tensor's storage, so a result whose
// gradient arrives much later (a recomputed segment's output, a tiled
// block's) need not keep its memory until then. A leaf has no graph: its
// Root refers to the leaf itself, which must stay alive for Backward to
// add into its gradient.
type Root struct {
	node  *node
	leaf  *Tensor // the tensor itself when it is a leaf (not held)
	shape []int
	dtype DType
	dev   device.Device
}

// Root returns t's root for a Backward after t is released (unless t is
// a leaf); the caller releases it.
func (t *Tensor) Root() *Root {
	t.mustLive("Root")
	r := t.root()
	if r.node != nil {
		r.node.retain()
	}
	return r
}

// root is t's root, holding nothing of it (t's own references stand).
func (t *Tensor) root() *Root {
	r := &Root{node: t.node, shape: t.shape, dtype: t.dtype, dev: t.st.dev}
	if t.node == nil {
		r.leaf = t
	}
	return r
}

// Backward is the Backward of the tensor r was taken from.
func (r *Root) Backward(opts ...BackwardOption) {
	if r.node == nil && r.leaf == nil {
		panic(errorf("backward", "a released Root"))
	}
	r.backward(opts)
}

// Release drops r's hold on the graph; it is idempotent.
func (r *Root) Release() {
	if r.node != nil {
		r.node.release()
		r.node = nil
	}
	r.leaf = nil
}

func (r *Root) backward(opts []BackwardOption) {
	backwardCalls.Add(1)
	var cfg backwardConfig
	for _, o := range opts {
		o(&cfg)
	}
	bs := backwardScope()
	var seed *Tensor
	if cfg.grad != nil {
		if !slices.Equal(cfg.grad.shape, r.shape) {
			panic(errorf("backward", "gradient of shape %v for a tensor of shape %v", cfg.grad.shape, r.shape))
		}
		seed = cfg.grad
		if !cfg.taken {
			seed = cfg.grad.share()
		}
	} else {
		if numel(r.shape) != 1 {
			panic(errorf("backward", "%v %v is not a scalar; give its gradient with WithGrad", r.dtype, r.shape))
		}
		seed = mustAlloc(r.dev, r.dtype, r.shape, memory.Temporary)
		r.dev.Fill(seed.view(), 1)
	}
	if r.node == nil {
		t := r.leaf
		if t.requiresGrad {
			accumulateLeaf(bs, t, seed)
			if t.gradReady != nil {
				t.gradReady(t)
			}
		}
		seed.Release()
		return
	}

	// Count, for every node reachable from the root, how many edges lead
	// into it, so that a node runs only once all its output gradients have
	// arrived. Leaves with an OnGradReady hook are counted the same way.
	pending := map[*node]int{}
	var leafPending map[*Tensor]int
	contributed := map[*Tensor]bool{} // hooked leaves this pass added to
	stack := []*node{r.node}
	seen := map[*node]bool{r.node: true}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, e := range n.edges {
			if e.leaf != nil && e.leaf.gradReady != nil {
				if leafPending == nil {
					leafPending = map[*Tensor]int{}
				}
				leafPending[e.leaf]++
			}
			if e.node == nil {
				continue
			}
			pending[e.node]++
			if !seen[e.node] {
				seen[e.node] = true
				stack = append(stack, e.node)
			}
		}
	}
	grads := map[*node]*Tensor{r.node: seed}
	ready := []*node{r.node}
	defer func() {
		// On a panic (shape error in a backward function, OOM) release
		// what is in flight so nothing leaks.
		for _, g := range grads {
			g.Release()
		}
	}()
	for len(ready) > 0 {
		n := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		g := grads[n]
		var inGrads []*Tensor
		if g != nil {
			// A node none of whose outputs received a gradient still
			// passes through, so the nodes below it are counted down.
			// g stays in grads until the node has run, so that a panic
			// (a version error, out of memory) still releases it.
			n.checkSaved()
			if !n.accumulateInPlace(g, grads) {
				n.unpack()
				inGrads = n.backward(bs, g, n.saved)
			}
			g.Release()
		}
		delete(grads, n)
		for i, e := range n.edges {
			var gi *Tensor
			if i < len(inGrads) {
				gi = inGrads[i]
			}
			if gi != nil && (e.node != nil || e.leaf != nil) {
				if !slices.Equal(gi.shape, e.shape) {
					panic(errorf("backward", "%s produced a gradient of shape %v for input %d of shape %v", n.op, gi.shape, i, e.shape))
				}
				if gi.dtype != e.dtype {
					c := bs.Cast(gi, e.dtype)
					gi.Release()
					gi = c
				}
				if e.leaf != nil {
					if !isOwnGrad(gi, e.leaf) {
						accumulateLeaf(bs, e.leaf, gi)
					}
					if e.leaf.gradReady != nil {
						contributed[e.leaf] = true
					}
				} else if prev := grads[e.node]; prev != nil {
					sum := bs.Add(prev, gi)
					prev.Release()
					grads[e.node] = sum
				} else {
					grads[e.node] = gi.share()
				}
			}
			gi.Release()
			if e.node != nil {
				pending[e.node]--
				if pending[e.node] == 0 {
					ready = append(ready, e.node)
				}
			}
			if leaf := e.leaf; leaf != nil && leaf.gradReady != nil {
				if leafPending[leaf]--; leafPending[leaf] == 0 && contributed[leaf] && leaf.grad != nil {
					leaf.gradReady(leaf)
				}
			}
		}
		for _, gi := range inGrads[min(len(inGrads), len(n.edges)):] {
			gi.Release()
		}
		if !cfg.retain {
			n.freeSaved()
		} else {
			n.dropUnpacked()
		}
	}
}

// accumulateInPlace adds the node's input gradient into the one already
// accumulated for its input, when the node can (addInto) and nothing else
// holds that gradient's storage; it reports whether it did.
func (n *node) accumulateInPlace(g *Tensor, grads map[*node]*Tensor) bool {
	if n.addInto == nil || len(n.edges) != 1 || n.edges[0].node == nil {
		return false
	}
	prev := grads[n.edges[0].node]
	if prev == nil || prev.st.refs.Load() != 1 || prev.dtype != g.dtype {
		return false
	}
	n.addInto(prev, g)
	prev.st.version.Add(1)
	return true
}

// accumulateLeaf adds g into leaf.grad, allocating it (memory.Gradient, the
// leaf's dtype) on first use.
func accumulateLeaf(bs *Scope, leaf, g *Tensor) {
	dev := leaf.st.dev
	if leaf.grad == nil {
		cat := memory.Gradient
		if leaf.gradCat != 0 {
			cat = leaf.gradCat
		}
		if adoptable(g, leaf) {
			// The incoming gradient is a buffer nothing else holds, laid
			// out as the leaf: it becomes the gradient, recounted under
			// cat, instead of being copied into a new one.
			dev.Memory().Recategorize(g.st.buf.Block, cat)
			leaf.grad = viewOf(g, leaf.shape, contiguousStrides(leaf.shape), 0)
			return
		}
		gr := mustAlloc(dev, leaf.dtype, leaf.shape, cat)
		dev.Copy(gr.view(), g.view())
		leaf.grad = gr
		return
	}
	dev.Binary(device.Add, leaf.grad.view(), leaf.grad.view(), g.broadcastView(leaf.grad.shape))
	leaf.grad.st.version.Add(1)
}

// adoptable reports whether g can become leaf's gradient as it is: same
// dtype and shape, contiguous, alone in a buffer of exactly its size that
// no other handle shares.
func adoptable(g, leaf *Tensor) bool {
	b := g.st.buf.Block
	return b != nil && g.st.refs.Load() == 1 && g.dtype == leaf.dtype && g.offset == 0 &&
		slices.Equal(g.shape, leaf.shape) && g.IsContiguous() &&
		b.Requested() == int64(g.Len()*g.dtype.Size())
}

// SetGradCategory sets the allocator category of the gradient backward
// allocates for this leaf (memory.Gradient unless set). Code that makes a
// leaf only to collect the gradient flowing into it — activation
// checkpointing's recomputed input — counts it as memory.Temporary, so
// that Gradient stays exactly the parameters' gradients.
func (t *Tensor) SetGradCategory(c memory.Category) *Tensor {
	t.gradCat = c
	return t
}

// TakeGrad removes a leaf's gradient and hands it to the caller, counted
// from then on as memory.Temporary: used by code that makes a leaf only to
// collect the gradient flowing into it (activation checkpointing).
func (t *Tensor) TakeGrad() *Tensor {
	g := t.grad
	t.grad = nil
	if g != nil && g.st.buf.Block != nil {
		g.st.dev.Memory().Recategorize(g.st.buf.Block, memory.Temporary)
	}
	return g
}
