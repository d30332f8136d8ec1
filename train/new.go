package train

import (
	"fmt"
	"io"
	"strings"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	_ "github.com/memfit/memfit/device/cpu"  // registers "cpu"
	_ "github.com/memfit/memfit/device/meta" // registers "meta"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// PrefetchBytes bounds the batches -prefetch holds ahead by size: a large
// -prefetch of large batches would otherwise grow the process without
// bound before the first step.
const PrefetchBytes = 256 << 20

// NewDevice returns the device a Config names, with its memory limit.
func NewDevice(cfg Config) (device.Device, error) { return NewDeviceOrdinal(cfg, 0) }

// NewDeviceOrdinal is NewDevice on GPU ordinal for -device cuda (a rank's
// GPU on a machine of several); other devices ignore it. Devices are
// opened by name from device's registry: cpu and meta are always there;
// a program offers cuda by importing device/cuda (cmd/train does). The
// capabilities Config.Without names are hidden, so their composed
// fallbacks run.
func NewDeviceOrdinal(cfg Config, ordinal int) (device.Device, error) {
	d, err := device.Open(cfg.Device.Name, device.Options{Capacity: cfg.Device.MemLimit, Ordinal: ordinal})
	if err != nil {
		return nil, fmt.Errorf("-device %s: %v", cfg.Device.Name, err)
	}
	if len(cfg.Device.Without) > 0 {
		d = device.Without(d, cfg.Device.Without...)
	}
	return d, nil
}

// New builds everything a Config describes on dev: data, model, optimizer,
// loss scaler, freezing and the checkpoint policy. log receives notable
// events (nil: discard). It trains in this process alone: for -dist, see
// NewDistributed.
func New(cfg Config, dev device.Device, log io.Writer) (*Trainer, error) {
	return NewDistributed(cfg, dev, nil, log)
}

// NewDistributed is New for one rank of a data-parallel group: every rank
// of comm calls it with the same Config (Batch is per rank) on its own
// device. Parameters start from rank 0's; Config.Zero chooses replicated
// (0) or sharded (1, 2) optimizer state. Only rank 0 logs. A nil comm is
// New.
func NewDistributed(cfg Config, dev device.Device, comm parallel.Comm, log io.Writer) (*Trainer, error) {
	cfg, note, err := cfg.ApplyInit()
	if err != nil {
		return nil, err
	}
	if note != "" && log != nil {
		fmt.Fprintln(log, note)
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rank, ranks := 0, 1
	if comm != nil {
		rank, ranks = comm.Rank(), comm.Size()
	} else if cfg.Parallel.Zero > 0 {
		return nil, fmt.Errorf("-zero %d: needs -dist (ranks to shard over)", cfg.Parallel.Zero)
	}
	if rank != 0 {
		log = nil
	}
	ds, err := openData(cfg)
	if err != nil {
		return nil, err
	}
	loader, err := data.NewLoader(ds.train, data.LoaderConfig{
		Batch: cfg.Optim.Batch, DropLast: true, Shuffle: true, Seed: cfg.Seed,
		Workers: cfg.Data.Workers, Prefetch: cfg.Data.Prefetch, PrefetchBytes: PrefetchBytes, Rank: rank, Ranks: ranks,
	})
	if err != nil {
		if ranks > 1 {
			return nil, fmt.Errorf("-batch %d × %d ranks: %v", cfg.Optim.Batch, ranks, err)
		}
		return nil, fmt.Errorf("-batch: %v", err)
	}
	t, err := assemble(cfg, dev, ds, &loaderBatches{l: loader}, comm, log)
	if err != nil {
		return nil, err
	}
	t.val = ds.val
	t.warnIdle()
	return t, nil
}

// warnIdle warns once about settings that would silently do nothing.
func (t *Trainer) warnIdle() {
	cfg := t.Config
	if cfg.Output.SaveEvery > 0 && cfg.Output.Save == "" {
		t.logf("train: warning: -save-every %d does nothing without -save", cfg.Output.SaveEvery)
	}
	if len(t.frozen) > 0 && len(t.frozen) == len(t.Model.Parameters()) && cfg.Memory.UnfreezeAt == 0 {
		t.logf("train: warning: -freeze %s matches every parameter: nothing trains", strings.Join(cfg.Memory.Freeze, ","))
	}
	if (t.val == nil || t.val.Len() == 0) && cfg.Output.EvalEvery > 0 {
		t.logf("train: warning: -eval-every %d: no held-out data (-val-split %g), evaluation does nothing", cfg.Output.EvalEvery, cfg.Data.ValSplit)
	}
}

// assemble builds model, optimizer and techniques for ds on dev.
func assemble(cfg Config, dev device.Device, ds *dataset, batches Batches, comm parallel.Comm, log io.Writer) (*Trainer, error) {
	model, err := buildModel(dev, cfg, ds)
	if err != nil {
		return nil, err
	}
	t := &Trainer{Config: cfg, Device: dev, Model: model, Log: log, train: batches, accum: cfg.Memory.Accum,
		task: task{tokens: ds.tokens, classes: ds.classes}, inShape: ds.inShape, codec: ds.codec, runID: newRunID()}
	fail := func(err error) (*Trainer, error) {
		t.Close()
		return nil, err
	}
	if cfg.Memory.LoRA.Rank > 0 {
		if err := t.applyLoRA(); err != nil {
			return fail(err)
		}
	}
	if cfg.Memory.Offload.Mode != "" && cfg.Memory.Offload.Mode != "off" {
		if err := t.setupOffload(cfg); err != nil {
			return fail(err)
		}
	}
	if t.offOpt == nil {
		if t.Opt, err = newOptimizer(cfg, model.Parameters()); err != nil {
			return fail(err)
		}
	}
	if cfg.Optim.Steps > 0 {
		t.total = cfg.Optim.Steps
	} else {
		t.total = cfg.Optim.Epochs * batches.PerEpoch()
	}
	var sched optim.Schedule = optim.Constant{}
	switch {
	case cfg.Optim.Schedule == "cosine":
		sched = optim.WarmupCosine{Warmup: cfg.Optim.Warmup, Total: t.total, Floor: 0.1}
	case cfg.Optim.Warmup > 0:
		sched = optim.Warmup{Steps: cfg.Optim.Warmup}
	}
	if err := t.Opt.SetSchedule(sched); err != nil {
		return fail(fmt.Errorf("-schedule: %v", err))
	}
	if t.adapted != nil {
		t.frozen = t.adapted.Base
	} else if t.frozen, err = freezeModel(model, t.Opt, cfg.Memory.Freeze); err != nil {
		return fail(err)
	}
	if comm != nil {
		err := t.setupDist(comm, func(shard []*tensor.Tensor) (*optim.Optimizer, error) {
			o, err := newOptimizer(cfg, shard)
			if err == nil {
				err = o.SetSchedule(sched)
			}
			return o, err
		})
		if err != nil {
			return fail(err)
		}
	}
	switch cfg.Precision.AMP {
	case "bf16":
		t.autocast = tensor.BF16
	case "fp16":
		t.autocast = tensor.F16
		var sc amp.ScalerConfig
		if t.distributed() {
			sc.Agree = t.agree
		}
		t.Scaler = amp.NewGradScaler(sc)
	}
	if err := t.holdFrozenInAutocast(); err != nil {
		return fail(err)
	}
	spec, _ := ParseCheckpoint(cfg.Memory.Checkpoint)
	switch spec.Kind {
	case "every":
		t.policy = checkpoint.Every
	case "sqrt":
		t.policy = checkpoint.Sqrt
	case "segments":
		t.policy = checkpoint.Segments(spec.Segments)
	case "budget":
		t.policy = checkpoint.Budget(spec.Budget)
	default:
		t.policy = checkpoint.Off
	}
	runner := t.policy.Runner()
	if t.acts != nil {
		runner = t.acts.Runner(runner)
	}
	if t.zero3 != nil {
		runner = t.zero3.Runner(runner)
	}
	model.SetBlockRunner(runner)
	if cfg.Memory.StepInBackward {
		t.armStepInBackward()
	}
	if cfg.Output.Resume != "" {
		if err := t.Resume(cfg.Output.Resume); err != nil {
			return fail(err)
		}
		if t.offOpt != nil {
			// The weights were loaded on the device: the host's
			// copies follow.
			if err := t.offOpt.Pull(); err != nil {
				return fail(err)
			}
		}
	}
	return t, nil
}

// newOptimizer builds the -optim optimizer over params, by name from
// optim's registry.
func newOptimizer(cfg Config, params []*tensor.Tensor) (*optim.Optimizer, error) {
	o, err := optim.New(cfg.Optim.Name, params, optim.Settings{LR: cfg.Optim.LR, WeightDecay: cfg.Optim.WD})
	if err != nil {
		return nil, fmt.Errorf("-optim %s: %v", cfg.Optim.Name, err)
	}
	if cfg.Precision.Weights == "bf16" {
		// Seeded from the run's seed: deterministic, and a resumed run
		// draws what the uninterrupted one would (the bits depend on each
		// parameter's update count, which the checkpoint keeps).
		o.SetStochasticRounding(cfg.Seed ^ 0x5eed_b16)
	}
	return o, nil
}

// Close releases the model's parameters, gradients and optimizer state;
// calling it again does nothing. It does not close the communicator, which
// belongs to the caller.
func (t *Trainer) Close() {
	switch {
	case t.zero3 != nil:
		t.zero3.Release() // and the shard optimizer, t.Opt
	case t.zero != nil:
		t.zero.Release() // and the shard optimizer, t.Opt
	case t.Opt != nil:
		t.Opt.Release()
	}
	t.closeOffload()
	if t.Model != nil {
		for _, p := range t.Model.Parameters() {
			p.Release()
		}
	}
	if lb, ok := t.train.(*loaderBatches); ok {
		lb.close()
	}
}
