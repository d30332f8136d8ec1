package tensor

import (
	"github.com/memfit/memfit/memory"
)

// Scope is where ops run. It decides whether ops record the autograd graph
// (Grad), which low-precision dtype autocast uses (Autocast), under which
// allocator category results are counted, and it owns every tensor its ops
// return until Close (or Keep).
//
// A Scope belongs to one goroutine at a time. Modes live in the Scope, not
// in package state, so a data-loader goroutine making tensors is never
// affected by another goroutine's no-grad or autocast region.
type Scope struct {
	grad     bool
	autocast DType // Invalid: autocast off
	cat      memory.Category
	track    bool // own the results (false inside backward)
	owned    []*Tensor
	casts    map[castKey]cachedCast // autocast copies of leaves, reused until Close
	closed   bool
	// home is the scope that owns this one's results and autocast copies
	// when this one is a view made by WithModes; nil when s owns its own.
	home *Scope
	// module is the layer whose forward is running (Enter), named on the
	// blocks of what ops return while allocation sites are recorded.
	module string
	// hooks packs what recording ops save for backward (SaveHooks).
	hooks SavedHooks
	// rows collects parameters' gradients summed over rows (SumRows).
	rows *RowSums
}

// ScopeOption configures a Scope.
type ScopeOption func(*Scope)

// NoGrad makes ops record nothing and save nothing: inference mode. A deep
// model's forward then needs memory for the largest layer, not for all.
func NoGrad() ScopeOption { return func(s *Scope) { s.grad = false } }

// Autocast runs matrix products (matmul, linear, conv, attention products)
// in dtype (F16 or BF16) with F32 accumulation; numerically sensitive ops
// (softmax, normalisation, losses, reductions, exp/log/pow) run in F32.
func Autocast(dtype DType) ScopeOption { return func(s *Scope) { s.autocast = dtype } }

// Category sets the allocator category of the scope's results (default
// memory.Activation).
func Category(c memory.Category) ScopeOption { return func(s *Scope) { s.cat = c } }

// NewScope returns a scope that records gradients unless NoGrad is given.
func NewScope(opts ...ScopeOption) *Scope {
	s := &Scope{grad: true, cat: memory.Activation, track: true}
	for _, o := range opts {
		o(s)
	}
	return s
}

// backwardScope is where backward functions run: nothing is recorded,
// results are temporaries owned by the engine.
func backwardScope() *Scope {
	return &Scope{cat: memory.Temporary}
}

// Grad reports whether ops in s record the autograd graph.
func (s *Scope) Grad() bool { return s.grad }

// AutocastDType is the scope's autocast dtype, or device.Invalid when off.
func (s *Scope) AutocastDType() DType { return s.autocast }

// With returns a child scope with the options applied, sharing nothing but
// the modes it does not override; its tensors are owned by the child.
func (s *Scope) With(opts ...ScopeOption) *Scope {
	c := &Scope{grad: s.grad, autocast: s.autocast, cat: s.cat, track: true, hooks: s.hooks, rows: s.rows}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithModes returns a view of s whose ops run with the options applied to
// s's modes but whose results s owns: they are released when s closes, and
// Keep on either hands them to the caller. nn.Eval uses it to run a forward
// without grad inside whatever scope the caller has, so an inference loop
// cannot keep a graph by forgetting tensor.NoGrad. Closing a view does
// nothing; close s.
func (s *Scope) WithModes(opts ...ScopeOption) *Scope {
	h := s.owning()
	v := &Scope{grad: s.grad, autocast: s.autocast, cat: s.cat, track: s.track, home: h, module: s.module, hooks: s.hooks, rows: s.rows}
	for _, o := range opts {
		o(v)
	}
	return v
}

// Enter names the module (a layer's path, "blocks.2.mlp.fc") whose
// forward runs in s until the returned function is called, which restores
// the one before: layers call defer r.Enter(path)(). While the allocator
// records history with sites (EnableAllocSites), the memory of what ops
// return meanwhile is labelled with the module, so a memory report says
// which layer holds it. It costs a comparison otherwise.
func (s *Scope) Enter(module string) (leave func()) {
	prev := s.module
	s.module = module
	return func() { s.module = prev }
}

// owning is the scope that owns s's results: s, or the scope s is a view of.
func (s *Scope) owning() *Scope {
	if s.home != nil {
		return s.home
	}
	return s
}

// own registers t as owned by s (by the scope s is a view of).
func (s *Scope) own(t *Tensor) *Tensor {
	if s.track {
		h := s.owning()
		if h.closed {
			panic(errorf("scope", "op on a closed scope"))
		}
		t.owner = h
		h.owned = append(h.owned, t)
	}
	if s.module != "" && t.st != nil {
		t.st.dev.Memory().SetModule(t.st.buf.Block, s.module)
	}
	return t
}

// Keep hands t from the scope to the caller, who must Release it.
func (s *Scope) Keep(t *Tensor) *Tensor {
	if t.owner == s.owning() {
		t.owner = nil
	}
	return t
}

// Close releases every tensor the scope still owns, and its autocast copies.
// It is safe to call more than once, and does nothing on a WithModes view.
func (s *Scope) Close() {
	if s.home != nil {
		return
	}
	for _, t := range s.owned {
		if t.owner == s {
			t.Release()
		}
	}
	s.owned = nil
	for _, c := range s.casts {
		c.t.Release()
	}
	s.casts = nil
	s.closed = true
}

// Step runs fn in a new scope, releases everything the scope still owns
// afterwards, and returns panics of tensor ops (shape errors, out of
// memory, bad indices) as errors. It is the boundary custom loops use
// around one training step.
func Step(fn func(s *Scope) error, opts ...ScopeOption) error {
	s := NewScope(opts...)
	defer s.Close()
	return Catch(func() error { return fn(s) })
}

type castKey struct {
	t     *Tensor
	dtype DType
}

type cachedCast struct {
	t       *Tensor
	version int64 // the leaf's version when cast
}
