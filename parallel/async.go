package parallel

import (
	"sync"
	"time"

	"github.com/memfit/memfit/tensor"
)

// Async is a communicator whose collectives can be started ahead of
// their use: StartAllGather queues a gather and returns at once, and the
// collective runs on a goroutine of Async's while the caller computes;
// Wait collects it. Every other collective waits its turn behind what is
// queued, so this rank's collectives reach the engine in the order the
// rank issued them, which is what keeps the ranks in step. That holds
// only if every collective of the rank goes through the Async, so wrap
// the engine once and use the wrapper everywhere (train does when
// ZeRO-3 prefetches).
//
// The goroutine runs while something is queued and ends when the queue
// is empty, so an Async needs no shutting down; Close closes the engine
// after the queue has drained. A collective started ahead reads its input
// and writes its output while the caller goes on: neither may be touched
// until Wait returns. The engines read and write CPU tensors in place and
// allocate nothing then (direct); GPU tensors are staged through copies
// their device makes on the collective's goroutine (its own worker thread
// serialises them with the kernels).
//
// An Async is used by one goroutine at a time, as any Comm.
type Async struct {
	c Comm

	mu      sync.Mutex
	queue   []*Request
	running bool
}

// Request is a collective started by an Async.
type Request struct {
	fn   func(Comm) error
	done chan struct{}
	err  error
	// Ran is how long the collective took once it started.
	Ran time.Duration
}

// NewAsync wraps c. Wrapping an Async returns it.
func NewAsync(c Comm) *Async {
	if a, ok := c.(*Async); ok {
		return a
	}
	return &Async{c: c}
}

// start queues fn, starting the goroutine if none runs.
func (a *Async) start(fn func(Comm) error) *Request {
	r := &Request{fn: fn, done: make(chan struct{})}
	a.mu.Lock()
	a.queue = append(a.queue, r)
	if !a.running {
		a.running = true
		go a.run()
	}
	a.mu.Unlock()
	return r
}

// run executes the queue in order until it is empty.
func (a *Async) run() {
	for {
		a.mu.Lock()
		if len(a.queue) == 0 {
			a.running = false
			a.mu.Unlock()
			return
		}
		r := a.queue[0]
		a.queue = a.queue[1:]
		a.mu.Unlock()
		begin := time.Now()
		r.err = r.fn(a.c)
		r.Ran = time.Since(begin)
		close(r.done)
	}
}

// idle reports whether nothing is queued or running.
func (a *Async) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.running
}

// do runs fn in turn: at once on the caller's goroutine when nothing is
// queued (no hand-over), else behind the queue.
func (a *Async) do(fn func(Comm) error) error {
	if a.idle() {
		return fn(a.c)
	}
	return a.start(fn).Wait()
}

// Wait blocks until the collective has run and returns its error.
func (r *Request) Wait() error {
	<-r.done
	return r.err
}

// StartAllGather queues AllGather(out, in) and returns at once.
func (a *Async) StartAllGather(out, in *tensor.Tensor) *Request {
	return a.start(func(c Comm) error { return c.AllGather(out, in) })
}

func (a *Async) Rank() int { return a.c.Rank() }
func (a *Async) Size() int { return a.c.Size() }

func (a *Async) AllReduce(t *tensor.Tensor, op Op) error {
	return a.do(func(c Comm) error { return c.AllReduce(t, op) })
}

func (a *Async) ReduceScatter(out, in *tensor.Tensor, op Op) error {
	return a.do(func(c Comm) error { return c.ReduceScatter(out, in, op) })
}

func (a *Async) AllGather(out, in *tensor.Tensor) error {
	return a.do(func(c Comm) error { return c.AllGather(out, in) })
}

func (a *Async) Broadcast(t *tensor.Tensor, root int) error {
	return a.do(func(c Comm) error { return c.Broadcast(t, root) })
}

func (a *Async) Barrier() error { return a.do(func(c Comm) error { return c.Barrier() }) }

// Close waits for the queue, then closes the engine.
func (a *Async) Close() error {
	_ = a.do(func(Comm) error { return nil }) // drain: a failed collective was returned to its waiter
	return a.c.Close()
}
