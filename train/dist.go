package train

import (
	"fmt"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// Data parallelism. Every rank builds the same Trainer on its own device;
// the loader deals each rank its block of every global batch (-batch is
// per rank), and the optimizer step goes through one of three paths that
// the rest of the loop does not tell apart:
//
//   - one process: the optimizer steps the gradients backward left;
//   - DDP (-zero 0): gradients are averaged over the ranks, then every rank
//     steps its full optimizer — identical updates on identical replicas;
//   - ZeRO (-zero 1|2): parallel.ZeRO reduce-scatters the gradients, each rank
//     steps the optimizer of its shard and the parameters are all-gathered;
//   - ZeRO-3 (-zero 3): parallel.ZeRO3 holds only each rank's shard of the
//     parameters, gathers a block's around its forward and backward (the
//     model's block runner, wrapped) and reduce-scatters its gradients as
//     backward leaves them; each rank steps its shard. beforeForward
//     gathers the parameters outside the blocks before every forward, and
//     a save gathers the whole model.
//
// Everything a rank decides alone would let the replicas drift apart, so
// each such decision is agreed on: the mean loss (and with it the
// non-finite check), the loss scaler's overflow, and stopping on a
// signal. Rank 0 alone prints, writes metrics and saves; a checkpoint holds
// the full state (ZeRO's shards gathered) and resumes on any rank count.

// setupDist builds the DDP or ZeRO machinery over comm; called by assemble
// after freezing, so that the shards are cut from the trainable parameters.
func (t *Trainer) setupDist(comm parallel.Comm, newOpt func([]*tensor.Tensor) (*optim.Optimizer, error)) error {
	if t.Config.Parallel.Zero == 3 && t.Config.Parallel.ZeroPrefetch {
		// Prefetches run on the Async's goroutine; every collective of
		// the rank goes through it, in the order issued.
		comm = parallel.NewAsync(comm)
	}
	t.comm, t.rank, t.ranks = comm, comm.Rank(), comm.Size()
	if t.Config.Parallel.Zero == 3 {
		m, ok := t.Model.(nn.Model)
		if !ok {
			return fmt.Errorf("-zero 3: the model (%T) has no blocks to shard by", t.Model)
		}
		// A GPT's layers before its blocks are embedding lookups,
		// whose backward reads no weights.
		_, gpt := t.Model.(*models.GPT)
		z, err := parallel.NewZeRO3(comm, m, parallel.ZeRO3Config{LookupsBeforeBlocks: gpt, Prefetch: t.Config.Parallel.ZeroPrefetch}, newOpt)
		if err != nil {
			return fmt.Errorf("-zero 3: %v", err)
		}
		t.Opt.Release()
		t.Opt, t.zero3 = z.Optimizer(), z
		return nil
	}
	if t.Config.Parallel.Zero == 0 {
		d, err := parallel.NewDDP(comm, t.Model.Parameters(), parallel.DDPConfig{})
		if err != nil {
			return fmt.Errorf("-dist: %v", err)
		}
		t.ddp = d
		return nil
	}
	zc := parallel.ZeROConfig{Stage: t.Config.Parallel.Zero}
	if zc.Stage == 2 {
		// Stage 2 reduces during backward, a bucket at a time: buckets
		// of 1/32 of the gradients keep few full gradients waiting.
		var P int64
		for _, p := range t.Opt.Params() {
			if p.RequiresGrad() {
				P += int64(p.Len())
			}
		}
		zc.BucketBytes = min(max(4*P/32, 4<<10), parallel.DefaultBucketBytes)
	}
	// The shards are cut from the trainable parameters only (-zero
	// refuses -unfreeze-at): a frozen one would cost collectives, and on
	// the meta device, whose collectives say every rank has every
	// gradient, a plan would give it a gradient and state.
	var trainable []*tensor.Tensor
	for _, p := range t.Opt.Params() {
		if p.RequiresGrad() {
			trainable = append(trainable, p)
		}
	}
	z, err := parallel.NewZeRO(comm, trainable, zc, newOpt)
	if err != nil {
		return fmt.Errorf("-zero %d: %v", t.Config.Parallel.Zero, err)
	}
	t.Opt.Release()
	t.Opt, t.zero = z.Optimizer(), z
	return nil
}

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

// armReduction makes ZeRO stage 2 reduce during the coming backward: with
// accumulation every micro-batch's, so that the full gradients of one
// never outlive its backward (DeepSpeed's stage 2; stage 1 keeps them and
// communicates once per step, as DDP).
func (t *Trainer) armReduction() error {
	if t.zero == nil || t.zero.Stage() != 2 {
		return nil
	}
	return t.zero.ReduceDuringBackward()
}

// reduceGradients averages the gradients over the ranks: once per
// optimizer step, after the last micro-batch's backward.
func (t *Trainer) reduceGradients() error {
	switch {
	case t.zero3 != nil:
		return t.zero3.ReduceGradients()
	case t.zero != nil:
		return t.zero.ReduceGradients()
	case t.ddp != nil:
		return t.ddp.ReduceGradients()
	}
	return nil
}

// stepTarget is what the loss scaler unscales and steps: the optimizer, or
// under ZeRO this rank's shard with an update that all-gathers.
func (t *Trainer) stepTarget() amp.Optimizer {
	if t.zero3 != nil {
		return zero3Target{t.zero3}
	}
	if t.zero != nil {
		return zeroTarget{t.zero}
	}
	if t.offOpt != nil {
		return offloadTarget{t.offOpt, t.Opt}
	}
	return t.Opt
}

type zeroTarget struct{ z *parallel.ZeRO }

type zero3Target struct{ z *parallel.ZeRO3 }

func (z zero3Target) Params() []*tensor.Tensor { return z.z.Shard() }
func (z zero3Target) Step() error              { return z.z.Update() }

func (z zeroTarget) Params() []*tensor.Tensor { return z.z.Shard() }
func (z zeroTarget) Step() error              { return z.z.Update() }

// clipGradNorm clips to the global norm over all ranks' gradients.
func (t *Trainer) clipGradNorm(maxNorm float64) (float64, error) {
	if t.zero3 != nil {
		return t.zero3.ClipGradNorm(maxNorm)
	}
	if t.zero != nil {
		return t.zero.ClipGradNorm(maxNorm)
	}
	if t.offOpt != nil {
		// The gradients are the device's until the step moves them.
		return optim.ClipGradNorm(t.offOpt.Params(), maxNorm)
	}
	return t.Opt.ClipGradNorm(maxNorm) // after DDP's average every rank holds the same gradients
}

// gradNorm is the global gradient norm.
func (t *Trainer) gradNorm() (float64, error) {
	if t.zero3 != nil {
		return t.zero3.GradNorm()
	}
	if t.zero != nil {
		return t.zero.GradNorm()
	}
	if t.offOpt != nil {
		// After an overlapped backward the gradients are the masters'.
		return optim.GradNorm(t.offOpt.GradHolders())
	}
	return optim.GradNorm(t.Opt.Params())
}

// zeroGrad releases every gradient the step used.
func (t *Trainer) zeroGrad() {
	if t.zero3 != nil {
		t.zero3.ZeroGrad()
		return
	}
	if t.zero != nil {
		t.zero.ZeroGrad()
		return
	}
	if t.offOpt != nil {
		// First: it waits for the host's updates, which read the
		// masters' gradients that t.Opt's ZeroGrad frees.
		t.offOpt.ZeroGrad()
	}
	t.Opt.ZeroGrad()
}

// exportOptimizer is the full optimizer state; under ZeRO a collective.
func (t *Trainer) exportOptimizer() (optim.State, error) {
	if t.zero3 != nil {
		return t.zero3.ExportFull()
	}
	if t.zero != nil {
		return t.zero.ExportFull()
	}
	return t.Opt.Export()
}

// importOptimizer loads a full optimizer state (this rank's shard of it
// under ZeRO).
func (t *Trainer) importOptimizer(st optim.State) error {
	if t.zero3 != nil {
		return t.zero3.ImportFull(st)
	}
	if t.zero != nil {
		return t.zero.ImportFull(st)
	}
	return t.Opt.Import(st)
}

// globalBatch is the number of examples of one optimizer step over all
// ranks.
func (t *Trainer) globalBatch() int { return t.Config.Optim.Batch * max(t.ranks, 1) }

// beforeForward gathers ZeRO-3's parameters outside the blocks; called
// inside a step or an evaluation, where a failure leaves as a panic that
// tensor.Step returns (with the rank named, as every collective error).
func (t *Trainer) beforeForward() {
	if t.zero3 == nil {
		return
	}
	if err := t.zero3.BeforeForward(); err != nil {
		panic(&tensor.Error{Op: "zero3", Msg: err.Error()})
	}
}

// distErr prefers the error ZeRO-3 kept from a failed collective (it
// wraps the *parallel.RankError naming the rank at fault) to the panic that
// carried it out of a forward or backward.
func (t *Trainer) distErr(err error) error {
	if err != nil && t.zero3 != nil && t.zero3.Err() != nil {
		return t.zero3.Err()
	}
	return err
}
