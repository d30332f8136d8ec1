package parallel

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/memfit/memfit/tensor"
)

// LocalOption configures NewLocal.
type LocalOption func(*hub)

// Timeout sets how long a collective of the in-process communicator waits
// for the last rank before failing with a *RankError naming it (default
// DefaultTimeout).
func Timeout(d time.Duration) LocalOption { return func(h *hub) { h.timeout = d } }

// NewLocal returns n communicators, ranks 0 … n-1 of one group, for n
// goroutines of this process (each typically with a device of its own). It
// is the engine of single-process data parallelism and the harness of this
// package's tests, not a network layer: values travel through shared
// memory, reductions run in float64 in rank order, so every rank gets
// bit-identical results.
//
// A rank that does not join a collective within the timeout, or closes
// while others wait for it, makes the others fail with a *RankError that
// names it; after such a failure every collective of the group fails at
// once with the same error (as with MPI and NCCL, a broken communicator is
// not reused).
func NewLocal(n int, opts ...LocalOption) []Comm {
	if n < 1 {
		n = 1
	}
	h := &hub{n: n, timeout: DefaultTimeout, rounds: map[uint64]*round{}, closed: make([]bool, n)}
	for _, o := range opts {
		o(h)
	}
	out := make([]Comm, n)
	for r := range out {
		out[r] = &local{h: h, rank: r}
	}
	return out
}

// hub is the state the ranks of one in-process group share.
type hub struct {
	n       int
	timeout time.Duration

	mu     sync.Mutex
	rounds map[uint64]*round // collectives in progress, by sequence number
	closed []bool
	failed error // first failure; the group is unusable afterwards
}

// sig is what every rank of a collective must agree on.
type sig struct {
	name string
	n    int // elements of the rank's tensor
	op   Op
	root int
}

func (s sig) String() string {
	switch s.name {
	case "broadcast":
		return fmt.Sprintf("%s(root %d, %d elements)", s.name, s.root, s.n)
	case "barrier":
		return s.name
	case "all_gather":
		return fmt.Sprintf("%s(%d elements)", s.name, s.n)
	}
	return fmt.Sprintf("%s(%v, %d elements)", s.name, s.op, s.n)
}

// round is one collective: each rank deposits its signature and values;
// done is closed when every rank has (or when the round failed: err).
type round struct {
	seq     uint64
	sigs    []sig
	data    [][]float64
	arrived []bool
	count   int
	read    int
	done    chan struct{}
	err     error
}

type local struct {
	h      *hub
	rank   int
	seq    uint64
	closed bool
}

func (l *local) Rank() int { return l.rank }
func (l *local) Size() int { return l.h.n }

// fail resolves r with err and breaks the group; h.mu is held.
func (h *hub) fail(r *round, err error) {
	if r.err == nil && r.count < h.n {
		r.err = err
		close(r.done)
	}
	if h.failed == nil {
		h.failed = err
	}
}

// missing returns the lowest rank that has not arrived in r (h.mu held).
func (h *hub) missing(r *round) int {
	for q, ok := range r.arrived {
		if !ok {
			return q
		}
	}
	return -1
}

// exchange deposits this rank's values for the next collective, waits for
// every rank and returns all ranks' values (indexed by rank).
func (l *local) exchange(s sig, vals []float64) ([][]float64, error) {
	if l.closed {
		return nil, ErrClosed
	}
	h := l.h
	l.seq++
	seq := l.seq
	h.mu.Lock()
	if h.failed != nil {
		err := h.failed
		h.mu.Unlock()
		return nil, err
	}
	r := h.rounds[seq]
	if r == nil {
		r = &round{seq: seq, sigs: make([]sig, h.n), data: make([][]float64, h.n), arrived: make([]bool, h.n), done: make(chan struct{})}
		h.rounds[seq] = r
	}
	r.sigs[l.rank], r.data[l.rank], r.arrived[l.rank] = s, vals, true
	r.count++
	if r.count == h.n {
		close(r.done)
	} else {
		for q, c := range h.closed {
			if c && !r.arrived[q] {
				h.fail(r, &RankError{Rank: q, Op: s.name, Seq: seq, Reason: "has closed its communicator"})
				break
			}
		}
	}
	h.mu.Unlock()

	timer := time.NewTimer(h.timeout)
	defer timer.Stop()
	select {
	case <-r.done:
	case <-timer.C:
		h.mu.Lock()
		if r.count < h.n && r.err == nil {
			h.fail(r, &RankError{Rank: h.missing(r), Op: s.name, Seq: seq,
				Reason: fmt.Sprintf("did not join within %v (dead, hung or out of step)", h.timeout)})
		}
		h.mu.Unlock()
		<-r.done
	}
	if r.err != nil {
		return nil, r.err
	}
	h.mu.Lock()
	r.read++
	if r.read == h.n {
		delete(h.rounds, seq)
	}
	h.mu.Unlock()
	for q, qs := range r.sigs {
		if qs != r.sigs[0] {
			err := &RankError{Rank: q, Op: s.name, Seq: seq, Reason: fmt.Sprintf("called %v while rank 0 called %v", qs, r.sigs[0])}
			h.mu.Lock()
			if h.failed == nil {
				h.failed = err
			}
			h.mu.Unlock()
			return nil, err
		}
	}
	return r.data, nil
}

func (l *local) AllReduce(t *tensor.Tensor, op Op) error {
	if err := checkF32("all_reduce", "tensor", t); err != nil {
		return err
	}
	all, err := l.exchange(sig{name: "all_reduce", n: t.Len(), op: op}, float64s(t))
	if err != nil {
		return err
	}
	return setF64(t, reduce(all, op, 0, t.Len()))
}

func (l *local) ReduceScatter(out, in *tensor.Tensor, op Op) error {
	if err := checkScatter("reduce_scatter", l.h.n, out, in); err != nil {
		return err
	}
	all, err := l.exchange(sig{name: "reduce_scatter", n: in.Len(), op: op}, float64s(in))
	if err != nil {
		return err
	}
	k := out.Len()
	return setF64(out, reduce(all, op, l.rank*k, k))
}

func (l *local) AllGather(out, in *tensor.Tensor) error {
	if err := checkScatter("all_gather", l.h.n, in, out); err != nil {
		return err
	}
	all, err := l.exchange(sig{name: "all_gather", n: in.Len()}, float64s(in))
	if err != nil {
		return err
	}
	cat := make([]float64, 0, out.Len())
	for _, v := range all {
		cat = append(cat, v...)
	}
	return setF64(out, cat)
}

func (l *local) Broadcast(t *tensor.Tensor, root int) error {
	if err := checkF32("broadcast", "tensor", t); err != nil {
		return err
	}
	if root < 0 || root >= l.h.n {
		return fmt.Errorf("dist: broadcast: root %d outside [0, %d)", root, l.h.n)
	}
	var vals []float64
	if l.rank == root {
		vals = float64s(t)
	}
	all, err := l.exchange(sig{name: "broadcast", n: t.Len(), root: root}, vals)
	if err != nil || l.rank == root {
		return err
	}
	return setF64(t, all[root])
}

func (l *local) Barrier() error {
	_, err := l.exchange(sig{name: "barrier"}, nil)
	return err
}

// Close leaves the group. Ranks waiting for this one in a collective it
// has not joined fail at once with a *RankError naming it.
func (l *local) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	h := l.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed[l.rank] = true
	for _, r := range h.rounds {
		if !r.arrived[l.rank] {
			h.fail(r, &RankError{Rank: l.rank, Op: r.sigs[h.firstArrived(r)].name, Seq: r.seq, Reason: "has closed its communicator"})
		}
	}
	return nil
}

func (h *hub) firstArrived(r *round) int {
	for q, ok := range r.arrived {
		if ok {
			return q
		}
	}
	return 0
}

// reduce combines elements [off, off+k) of every rank's values in rank
// order, in float64.
func reduce(all [][]float64, op Op, off, k int) []float64 {
	out := append([]float64(nil), all[0][off:off+k]...)
	for _, v := range all[1:] {
		v = v[off : off+k]
		for i, x := range v {
			switch op {
			case Sum, Avg:
				out[i] += x
			case Max:
				out[i] = math.Max(out[i], x)
			case Min:
				out[i] = math.Min(out[i], x)
			}
		}
	}
	if op == Avg {
		n := float64(len(all))
		for i := range out {
			out[i] /= n
		}
	}
	return out
}
