package parallel

import (
	"errors"
	"fmt"
	"time"

	"github.com/memfit/memfit/tensor"
)

// Op is the reduction of AllReduce and ReduceScatter.
type Op uint8

// Reductions. Avg is Sum divided by the number of ranks.
const (
	Sum Op = iota
	Avg
	Max
	Min
)

func (op Op) String() string {
	switch op {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// Comm is a communicator: Size ranks, this one numbered Rank, taking part
// in collectives together. Every rank must call the same collectives in
// the same order with tensors of matching lengths; a rank that does not
// (it died, hangs or called another collective) makes the others return an
// error that names it, within the implementation's timeout, instead of
// hanging for ever.
//
// Tensors are contiguous F32 tensors on any device; results are written in
// place. Errors are returned, never panics: communication fails for reasons
// outside the program (a dead peer, a network), not for bugs.
//
// A Comm is used by one goroutine at a time (a rank's training loop).
type Comm interface {
	Rank() int
	Size() int
	// AllReduce replaces t, on every rank, by the reduction of every
	// rank's t.
	AllReduce(t *tensor.Tensor, op Op) error
	// ReduceScatter reduces every rank's in (Size·k elements) and leaves
	// in out (k elements) the rank's block: elements [Rank·k, (Rank+1)·k)
	// of the reduction.
	ReduceScatter(out, in *tensor.Tensor, op Op) error
	// AllGather concatenates every rank's in (k elements) in rank order
	// into out (Size·k elements) on every rank.
	AllGather(out, in *tensor.Tensor) error
	// Broadcast copies root's t into t on every other rank.
	Broadcast(t *tensor.Tensor, root int) error
	// Barrier returns when every rank has called it.
	Barrier() error
	// Close leaves the communicator; collectives other ranks are waiting
	// in fail at once with an error naming this rank.
	Close() error
}

// RankError is a collective that failed because of another rank: it did
// not arrive within the timeout, it closed, or it called a different
// collective (or the same with other lengths).
type RankError struct {
	Rank   int    // the rank at fault
	Op     string // the collective, e.g. "all_reduce"
	Seq    uint64 // its sequence number on this communicator (1 = the first)
	Reason string
}

func (e *RankError) Error() string {
	return fmt.Sprintf("dist: %s #%d: rank %d %s", e.Op, e.Seq, e.Rank, e.Reason)
}

// ErrClosed is returned by collectives on a communicator this rank closed.
var ErrClosed = errors.New("dist: communicator is closed")

// DefaultTimeout bounds how long a collective waits for the slowest rank
// before reporting it (in-process communicator and MPI watchdog).
const DefaultTimeout = 5 * time.Minute

// checkF32 returns an error unless t is a live contiguous F32 tensor.
func checkF32(op, what string, t *tensor.Tensor) error {
	switch {
	case t == nil:
		return fmt.Errorf("dist: %s: %s is nil", op, what)
	case t.Released():
		return fmt.Errorf("dist: %s: %s %v is released", op, what, t)
	case t.DType() != tensor.F32:
		return fmt.Errorf("dist: %s: %s %v: want f32", op, what, t)
	case !t.IsContiguous():
		return fmt.Errorf("dist: %s: %s %v is not contiguous", op, what, t)
	}
	return nil
}

// checkScatter checks ReduceScatter's and AllGather's lengths: big holds
// size·k elements, small k.
func checkScatter(op string, size int, small, big *tensor.Tensor) error {
	if err := checkF32(op, "small", small); err != nil {
		return err
	}
	if err := checkF32(op, "big", big); err != nil {
		return err
	}
	if big.Len() != size*small.Len() {
		return fmt.Errorf("dist: %s: %d elements against %d per rank × %d ranks", op, big.Len(), small.Len(), size)
	}
	return nil
}
