package parallel

import (
	"fmt"

	"github.com/memfit/memfit/tensor"
)

// NewMeta returns a communicator that stands for rank of size ranks
// without any other rank: for planning one rank's memory on the meta
// device (train's -plan -ranks N), where values are not computed anyway.
// Its collectives check their arguments as the engines do, exchange
// nothing, allocate nothing (as MPI on CPU tensors, in place) and
// succeed; host reads on the meta device give zeros, so whatever the
// ranks agree through a collective reads as zero: no rank failed, no
// rank lacks a gradient, no overflow.
func NewMeta(rank, size int) (Comm, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("dist: meta communicator: rank %d of %d ranks", rank, size)
	}
	return &metaComm{rank: rank, size: size}, nil
}

type metaComm struct {
	rank, size int
	closed     bool
}

func (m *metaComm) Rank() int { return m.rank }
func (m *metaComm) Size() int { return m.size }

func (m *metaComm) check(op string, ts ...*tensor.Tensor) error {
	if m.closed {
		return ErrClosed
	}
	for _, t := range ts {
		if err := checkF32(op, "tensor", t); err != nil {
			return err
		}
	}
	return nil
}

func (m *metaComm) AllReduce(t *tensor.Tensor, _ Op) error { return m.check("all_reduce", t) }

func (m *metaComm) ReduceScatter(out, in *tensor.Tensor, _ Op) error {
	if err := m.check("reduce_scatter"); err != nil {
		return err
	}
	return checkScatter("reduce_scatter", m.size, out, in)
}

func (m *metaComm) AllGather(out, in *tensor.Tensor) error {
	if err := m.check("all_gather"); err != nil {
		return err
	}
	return checkScatter("all_gather", m.size, in, out)
}

func (m *metaComm) Broadcast(t *tensor.Tensor, _ int) error { return m.check("broadcast", t) }
func (m *metaComm) Barrier() error                          { return m.check("barrier") }
func (m *metaComm) Close() error                            { m.closed = true; return nil }
