package train

import (
	"fmt"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// dataParallel is data parallelism (package parallel). Every rank builds
// the same Trainer on its own device; the loader deals each rank its
// block of every global batch (-batch is per rank), and the update goes
// through one of three updaters that the rest of the loop does not tell
// apart:
//
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
// each such decision is agreed on (ranks.go): the mean loss (and with it
// the non-finite check), the loss scaler's overflow, and stopping on a
// signal. Rank 0 alone prints, writes metrics and saves; a checkpoint
// holds the full state (ZeRO's shards gathered) and resumes on any rank
// count.
var dataParallel = &technique{
	name:  "data parallelism",
	group: "parallelism",
	doc:   "one rank per process under mpirun (-batch per rank); ZeRO shards the optimizer state (stage 1), the gradients (2) and the parameters (3) over the ranks",
	flags: func(f *Flags, c *Config) {
		p := &c.Parallel
		f.stringVar(&p.Engine, "dist", "data parallelism: off, or mpi (run under mpirun -np N; -batch is per rank)")
		f.intVar(&p.Zero, "zero", "ZeRO stage with -dist: 0 (replicas), 1 (optimizer state sharded), 2 (gradients too) or 3 (parameters too, gathered block by block)")
		f.boolVar(&p.ZeroPrefetch, "zero-prefetch", "with -zero 3: gather each block's parameters while the block before it computes (overlap, for one more block's parameters in memory)")
		f.intVar(&p.Ranks, "ranks", "with -dist and -plan or -fit: plan one rank of `n` ranks (mpirun's -np) without running them")
	},
	features: []feature{
		{name: "-dist", on: func(c *Config) bool { return c.Parallel.Engine != "off" && c.Parallel.Engine != "" || c.Parallel.group },
			flag: func(c *Config) string {
				if c.Parallel.Engine == "off" || c.Parallel.Engine == "" {
					return "-dist (NewDistributed's communicator)"
				}
				return flagOf("dist", c.Parallel.Engine)
			}},
		{name: "-zero", on: func(c *Config) bool { return c.Parallel.Zero > 0 }, flag: zeroFlag},
		{name: "-zero 3", on: func(c *Config) bool { return c.Parallel.Zero == 3 }, flag: zeroFlag},
		{name: "-zero-prefetch", on: func(c *Config) bool { return c.Parallel.ZeroPrefetch },
			flag: func(c *Config) string { return "-zero-prefetch" }},
		{name: "-ranks", on: func(c *Config) bool { return c.Parallel.Ranks > 0 },
			flag: func(c *Config) string { return flagOf("ranks", c.Parallel.Ranks) }},
	},
	needs: []rule{
		{"-zero", "-dist", "ranks to shard over"},
		{"-zero-prefetch", "-zero 3", "it prefetches the parameter gathers of ZeRO-3"},
		{"-ranks", "-dist", "it plans one rank of -dist's ranks"},
	},
	refuses: []rule{
		{"-zero", "-unfreeze-at", "the shards are cut once, from the trainable parameters"},
		{"-zero 3", "-optim adafactor", "its row and column statistics span whole matrices, which stage 3 cuts by element ranges: use -zero 1 or 2, which give each rank whole tensors"},
	},
	check: func(c *Config) error {
		p := c.Parallel
		switch p.Engine {
		case "off", "mpi":
		default:
			return bad("dist", p.Engine, "unknown engine (want off or mpi)")
		}
		switch {
		case p.Zero < 0 || p.Zero > 3:
			return bad("zero", p.Zero, "want 0, 1 (optimizer state sharded), 2 (gradients too) or 3 (parameters too)")
		case p.Ranks < 0:
			return bad("ranks", p.Ranks, "want a number of ranks to plan for, or 0")
		case p.Ranks > maxRanks:
			return bad("ranks", p.Ranks, fmt.Sprintf("over %d, the bound on ranks (every rank's step keeps a vector of all ranks' status)", maxRanks))
		}
		return nil
	},
	describe: func(c *Config) string {
		if c.Parallel.Engine != "off" && c.Parallel.Ranks > 0 {
			return fmt.Sprintf("one rank of %d, zero %d", c.Parallel.Ranks, c.Parallel.Zero)
		}
		return ""
	},
	fit: &fitAxis{
		// Exact, like DDP: stages 1 and 2 about as cheap as DDP, stage 3
		// dearer (zeroCost); never below the stage asked for, since the
		// user may know what the plan does not (the interconnect, other
		// jobs on the devices). Only when the plan is one rank of several.
		options: func(c Config) []Config {
			out := []Config{c}
			if shardable(c) {
				for z := c.Parallel.Zero + 1; z <= 3; z++ {
					d := c
					d.Parallel.Zero = z
					out = append(out, d)
				}
			}
			return out
		},
		cost: func(c, orig Config) float64 {
			return zeroCost(c.Parallel.Zero, c.Memory.Accum, c.Memory.Checkpoint != "off") /
				zeroCost(orig.Parallel.Zero, orig.Memory.Accum, orig.Memory.Checkpoint != "off")
		},
	},
	build: func(t *Trainer) (any, error) {
		if t.comm == nil {
			return nil, nil
		}
		switch t.Config.Parallel.Zero {
		case 0:
			return &ddpPart{}, nil
		case 3:
			return &zero3Part{}, nil
		}
		return &zeroPart{}, nil
	},
}

// maxRanks bounds -ranks: above the largest data-parallel jobs run.
const maxRanks = 1 << 16

func zeroFlag(c *Config) string { return flagOf("zero", c.Parallel.Zero) }

// shardable reports whether c plans one rank of several, so that Fit may
// raise its ZeRO stage: with one rank (or none given, a plan of one
// process) a shard is the whole.
func shardable(c Config) bool { return c.Parallel.Engine != "off" && c.Parallel.Ranks > 1 }

// rankVeto: raising -accum on one rank alone would desynchronise the
// collectives of the step.
type rankVeto struct{}

func (rankVeto) vetoRetry(t *Trainer, err error) error {
	if !t.distributed() {
		return nil
	}
	return fmt.Errorf("step %d, rank %d: %w (with -dist, lower -batch or raise -accum on every rank)", t.step+1, t.rank, err)
}

// tearsMidStep: the ranks meet in the step's collectives; they stop
// together, at a step boundary they agree on.
func (rankVeto) tearsMidStep(t *Trainer) bool { return t.distributed() }

// ddpPart averages every gradient over the ranks, then every rank steps
// its full optimizer.
type ddpPart struct {
	rankVeto
	plainUpdate
	ddp *parallel.DDP
}

func (p *ddpPart) shard(t *Trainer) error {
	d, err := parallel.NewDDP(t.comm, t.Model.Parameters(), parallel.DDPConfig{})
	if err != nil {
		return fmt.Errorf("-dist: %v", err)
	}
	p.ddp = d
	return nil
}

func (p *ddpPart) reduce(*Trainer) error { return p.ddp.ReduceGradients() }

// zeroPart is ZeRO stages 1 and 2: the trainable parameters' optimizer
// state (and under stage 2 their gradients) sharded over the ranks.
type zeroPart struct {
	rankVeto
	z *parallel.ZeRO
}

func (p *zeroPart) shard(t *Trainer) error {
	zc := parallel.ZeROConfig{Stage: t.Config.Parallel.Zero}
	// The shards are cut from the trainable parameters only (-zero
	// refuses -unfreeze-at): a frozen one would cost collectives, and on
	// the meta device, whose collectives say every rank has every
	// gradient, a plan would give it a gradient and state.
	var trainable []*tensor.Tensor
	var n int64
	for _, p := range t.Opt.Params() {
		if p.RequiresGrad() {
			trainable = append(trainable, p)
			n += int64(p.Len())
		}
	}
	if zc.Stage == 2 {
		// Stage 2 reduces during backward, a bucket at a time: buckets
		// of 1/32 of the gradients keep few full gradients waiting.
		zc.BucketBytes = min(max(4*n/32, 4<<10), parallel.DefaultBucketBytes)
	}
	z, err := parallel.NewZeRO(t.comm, trainable, zc, t.newOptimizer)
	if err != nil {
		return fmt.Errorf("-zero %d: %v", t.Config.Parallel.Zero, err)
	}
	t.Opt.Release()
	t.Opt, p.z = z.Optimizer(), z
	return nil
}

// beforeMicroBatch makes stage 2 reduce during the coming backward: with
// accumulation every micro-batch's, so that the full gradients of one
// never outlive its backward (DeepSpeed's stage 2; stage 1 keeps them and
// communicates once per step, as DDP).
func (p *zeroPart) beforeMicroBatch(*Trainer, microBatch) error {
	if p.z.Stage() != 2 {
		return nil
	}
	return p.z.ReduceDuringBackward()
}

func (p *zeroPart) reduce(*Trainer) error                               { return p.z.ReduceGradients() }
func (p *zeroPart) target(*Trainer) amp.Optimizer                       { return zeroTarget{p.z} }
func (p *zeroPart) clipGradNorm(_ *Trainer, m float64) (float64, error) { return p.z.ClipGradNorm(m) }
func (p *zeroPart) gradNorm(*Trainer) (float64, error)                  { return p.z.GradNorm() }
func (p *zeroPart) zeroGrad(*Trainer)                                   { p.z.ZeroGrad() }
func (p *zeroPart) exportState(*Trainer) (optim.State, error)           { return p.z.ExportFull() }
func (p *zeroPart) importState(_ *Trainer, st optim.State) error        { return p.z.ImportFull(st) }
func (p *zeroPart) close(*Trainer)                                      { p.z.Release() } // and the shard optimizer, t.Opt

// zeroTarget is what the loss scaler unscales and steps under ZeRO:
// this rank's shard, with an update that all-gathers.
type zeroTarget struct{ z *parallel.ZeRO }

func (z zeroTarget) Params() []*tensor.Tensor { return z.z.Shard() }
func (z zeroTarget) Step() error              { return z.z.Update() }

// zero3Part is ZeRO stage 3: each rank holds its shard of every
// parameter.
type zero3Part struct {
	rankVeto
	z *parallel.ZeRO3
}

// shapeModel builds the model with deferred parameters, drawn block by
// block as they are sharded: the model never exists whole on a rank, and
// a rank's peak at start is one block, not 4P. Not under -lora, whose
// checkpoints fingerprint the whole base when the adapters are applied.
func (p *zero3Part) shapeModel(t *Trainer, b *modelBuild) {
	if t.Config.Memory.LoRA.Rank == 0 {
		b.defer_ = true
	}
}

func (p *zero3Part) shard(t *Trainer) error {
	m, ok := t.Model.(nn.Model)
	if !ok {
		return fmt.Errorf("-zero 3: the model (%T) has no blocks to shard by", t.Model)
	}
	comm := t.comm
	if t.Config.Parallel.ZeroPrefetch {
		// Prefetches run on the Async's goroutine; every collective of
		// the rank goes through it, in the order issued.
		comm = parallel.NewAsync(comm)
		t.comm = comm
	}
	// A model whose layers before its blocks are embedding lookups, whose
	// backward reads no weights, says so.
	lb, _ := t.Model.(interface{ LookupsBeforeBlocks() bool })
	z, err := parallel.NewZeRO3(comm, m, parallel.ZeRO3Config{LookupsBeforeBlocks: lb != nil && lb.LookupsBeforeBlocks(), Prefetch: t.Config.Parallel.ZeroPrefetch}, t.newOptimizer)
	if err != nil {
		return fmt.Errorf("-zero 3: %v", err)
	}
	t.Opt.Release()
	t.Opt, p.z = z.Optimizer(), z
	return nil
}

func (p *zero3Part) wrapRunner(_ *Trainer, r nn.BlockRunner) nn.BlockRunner { return p.z.Runner(r) }

// beforeForward gathers the parameters outside the blocks; called inside
// a step or an evaluation, where a failure leaves as a panic that
// tensor.Step returns (with the rank named, as every collective error).
func (p *zero3Part) beforeForward(*Trainer) {
	if err := p.z.BeforeForward(); err != nil {
		panic(&tensor.Error{Op: "zero3", Msg: err.Error()})
	}
}

// abortStep prefers the error ZeRO-3 kept from a failed collective (it
// wraps the *parallel.RankError naming the rank at fault) to the panic
// that carried it out of a forward or backward.
func (p *zero3Part) abortStep(_ *Trainer, err error) error {
	if p.z.Err() != nil {
		return p.z.Err()
	}
	return err
}

// afterEvaluate evicts what the evaluation's forwards left gathered (the
// root group).
func (p *zero3Part) afterEvaluate(*Trainer) { p.z.Evict() }

// sampleable: rank 0 alone writes samples, and under ZeRO-3 the weights
// exist whole only while every rank gathers them.
func (p *zero3Part) sampleable() bool { return false }

func (p *zero3Part) reduce(*Trainer) error                               { return p.z.ReduceGradients() }
func (p *zero3Part) target(*Trainer) amp.Optimizer                       { return zero3Target{p.z} }
func (p *zero3Part) clipGradNorm(_ *Trainer, m float64) (float64, error) { return p.z.ClipGradNorm(m) }
func (p *zero3Part) gradNorm(*Trainer) (float64, error)                  { return p.z.GradNorm() }
func (p *zero3Part) zeroGrad(*Trainer)                                   { p.z.ZeroGrad() }
func (p *zero3Part) exportState(*Trainer) (optim.State, error)           { return p.z.ExportFull() }
func (p *zero3Part) importState(_ *Trainer, st optim.State) error        { return p.z.ImportFull(st) }
func (p *zero3Part) close(*Trainer)                                      { p.z.Release() } // and the shard optimizer, t.Opt

func (p *zero3Part) gatherAll(f func() error) error { return p.z.GatherAll(f) }
func (p *zero3Part) gatherEach(f func([]*tensor.Tensor) error) error {
	return p.z.GatherEach(f)
}
func (p *zero3Part) loadFull(value func(*tensor.Tensor) []float32) error {
	return p.z.LoadFull(value)
}

func (p *zero3Part) summarize(s *Summary) {
	z := p.z
	s.Zero3 = &Zero3Stats{
		Gathers: z.Gathers, Prefetches: z.Prefetches, Kept: z.Kept, Reductions: z.Reductions,
		GatherSec: z.GatherTime.Seconds(), GatherWaitSec: z.GatherWait.Seconds(), ReduceSec: z.ReduceTime.Seconds(),
	}
}

func (p *zero3Part) notePeaks(*PeakBytes) {}

type zero3Target struct{ z *parallel.ZeRO3 }

func (z zero3Target) Params() []*tensor.Tensor { return z.z.Shard() }
func (z zero3Target) Step() error              { return z.z.Update() }

// zero3 is the run's ZeRO-3 sharding, nil without -zero 3.
func (t *Trainer) zero3() *parallel.ZeRO3 {
	if p, ok := partAs[*zero3Part](t); ok {
		return p.z
	}
	return nil
}

// zero is the run's ZeRO 1/2 sharding, nil without it.
func (t *Trainer) zero() *parallel.ZeRO {
	if p, ok := partAs[*zeroPart](t); ok {
		return p.z
	}
	return nil
}

// zeroStage3Comm is what ZeRO stage 3's communication adds to a step,
// per micro-batch, as a fraction of a DDP step. Each micro-batch
// all-gathers every block before its forward and again before its
// backward, and reduce-scatters its gradients: three model-sized
// transfers where DDP's all-reduce moves two per optimizer step, so 1.5
// times DDP's bytes at one micro-batch, in one small collective per block
// and pass, none overlapped with compute (parallel/doc.go). Where
// communication is about 30% of a DDP step, as over a network it may be,
// the extra half costs 15%. BENCHMARKS.md ("ZeRO-3 ... its cost against
// stage 2") measured less on one machine, where a collective is a memory
// copy: stage 3's throughput at 0.98-1.01 of stage 2's over MPI in quiet
// pairs (0.61-1.52 in noisy ones and with the in-process engine). So 0.15
// is the network's estimate, not this machine's: it keeps stage 3 behind
// stages 1 and 2, more micro-batches and bf16 autocast (1.10), and ahead
// of recomputing activations (1.33), which no measurement of stage 3
// came near.
const zeroStage3Comm = 0.15

// zeroCost is the estimated step time of ZeRO stage z with accum
// micro-batches, relative to DDP's. Stage 1 moves DDP's bytes
// (reduce-scatter + all-gather for the all-reduce); stage 2's reduction
// during backward is an all-reduce, then the all-gather, 1.5 times DDP's
// bytes, but BENCHMARKS.md measured stages 1 and 2 no slower than DDP
// (39.7 and 41.2 samples/s against 39.2): a tie-breaking factor each, so
// that a lower stage, and the run as given, wins when both fit. With
// accumulation stage 2 reduces every micro-batch (its gradients stay
// sharded; stages 0 and 1 communicate once per step): an all-reduce
// each, counted as half of stage 3's transfers. Stage 3 gathers every
// micro-batch, and a recomputed segment gathers its blocks once more, 4
// transfers instead of 3.
func zeroCost(z, accum int, recompute bool) float64 {
	switch z {
	case 1:
		return 1.01
	case 2:
		return 1.02 + zeroStage3Comm*float64(accum-1)/2
	case 3:
		passes := 3.0
		if recompute {
			passes = 4
		}
		return 1 + zeroStage3Comm*float64(accum)*passes/3
	}
	return 1
}
