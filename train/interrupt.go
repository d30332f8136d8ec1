package train

import (
	"context"
	"errors"
	"sync"

	"github.com/memfit/memfit/memory"
)

// A run stops promptly when its context is cancelled (SIGINT, SIGTERM):
// between steps, as always, and also inside a step, between one op and
// the next, since every op allocates its result and the device's
// allocator refuses requests once interrupted (memory.Allocator.Interrupt).
// A step stopped inside is abandoned whole — its gradients dropped, its
// batch given back to the loader — so the state saved is the previous
// step's, exactly. Where abandoning a step midway would tear the state
// (an update already running during backward, ranks that must meet in
// their collectives) a technique says so (tearer) and the run stops at
// the next step boundary instead.

// tearer says that interrupting a step of the run midway would leave
// some of its state updated and some not.
type tearer interface{ tearsMidStep(t *Trainer) bool }

// stopper interrupts an allocator when a context is cancelled, while it
// is armed.
type stopper struct {
	mu    sync.Mutex
	mem   *memory.Allocator
	armed bool
	err   error // the context's, once it is done
	stop  func() bool
}

// newStopper watches ctx for mem; close ends the watch.
func newStopper(ctx context.Context, mem *memory.Allocator) *stopper {
	s := &stopper{mem: mem}
	s.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.err = ctx.Err()
		if s.armed {
			mem.Interrupt(s.err)
		}
	})
	return s
}

// arm lets a cancellation interrupt the allocator (at once if it came
// already).
func (s *stopper) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
	if s.err != nil {
		s.mem.Interrupt(s.err)
	}
}

// disarm serves the allocator's requests again.
func (s *stopper) disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	s.mem.Interrupt(nil)
}

func (s *stopper) close() {
	s.stop()
	s.disarm()
}

// interruptedBy reports whether err is a computation stopped because ctx
// was cancelled.
func interruptedBy(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// midStep reports whether a step of this run may be stopped midway.
func (t *Trainer) midStep() bool {
	return each(t, func(h tearer) error {
		if h.tearsMidStep(t) {
			return errTears
		}
		return nil
	}) == nil
}

var errTears = errors.New("tears")
