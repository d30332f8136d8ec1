package train

import (
	"fmt"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// A Trainer may be one rank of a data-parallel group (NewDistributed,
// the dataParallel technique). What a rank would decide alone is agreed
// on through the communicator here: the mean loss (and with it the
// non-finite check), the fp16 scaler's overflow, stopping on a signal.

// distributed reports whether the trainer has other ranks to agree with.
func (t *Trainer) distributed() bool { return t.comm != nil && t.ranks > 1 }

// agree returns whether any rank says yes.
func (t *Trainer) agree(yes bool) (bool, error) {
	if !t.distributed() {
		return yes, nil
	}
	v := float32(0)
	if yes {
		v = 1
	}
	out, err := t.allReduce(v, parallel.Max)
	return out != 0, err
}

// allReduce reduces one value over the ranks.
func (t *Trainer) allReduce(v float32, op parallel.Op) (float32, error) {
	x, err := tensor.FromFloat32(t.Device, []float32{v}, []int{1}, memory.Temporary)
	if err != nil {
		return 0, err
	}
	defer x.Release()
	if err := t.comm.AllReduce(x, op); err != nil {
		return 0, fmt.Errorf("-dist: %w", err)
	}
	return x.Float32s()[0], nil
}

// globalBatch is the number of examples of one optimizer step over all
// ranks.
func (t *Trainer) globalBatch() int { return t.Config.Optim.Batch * max(t.ranks, 1) }
