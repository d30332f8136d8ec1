package train

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	_ "github.com/memfit/memfit/device/cpu"  // registers "cpu"
	_ "github.com/memfit/memfit/device/meta" // registers "meta"
	"github.com/memfit/memfit/nn"
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
	return NewDistributedContext(context.Background(), cfg, dev, comm, log)
}

// NewDistributedContext is NewDistributed, stopped (with an error
// wrapping ctx's) when ctx is done while it reads the data and builds or
// imports the model; the Trainer's generation (GenerateText) stops with
// ctx too.
func NewDistributedContext(ctx context.Context, cfg Config, dev device.Device, comm parallel.Comm, log io.Writer) (*Trainer, error) {
	cfg, note, err := cfg.ApplyInit()
	if err != nil {
		return nil, err
	}
	if note != "" && log != nil {
		fmt.Fprintln(log, note)
	}
	cfg = cfg.Resolved()
	if comm != nil {
		cfg.Parallel.group = true
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rank, ranks := 0, 1
	if comm != nil {
		rank, ranks = comm.Rank(), comm.Size()
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
	stop := newStopper(ctx, dev.Memory())
	stop.arm()
	t, err := assemble(cfg, dev, ds, &loaderBatches{l: loader}, comm, log)
	stop.close()
	if err != nil {
		if ds.sft != nil {
			ds.sft.Close()
		}
		return nil, err
	}
	t.ctx = ctx
	t.val = ds.val
	if ds.sft != nil {
		t.data = ds.sft
		t.logf("-data %s: %v", cfg.Data.Path, ds.sft.Stats())
	}
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

// assemble builds model, optimizer and techniques for ds on dev: each
// technique the run uses makes its part (technique.build), and the
// parts' hooks run at fixed points (hooks.go), in technique order.
func assemble(cfg Config, dev device.Device, ds *dataset, batches Batches, comm parallel.Comm, log io.Writer) (*Trainer, error) {
	t := &Trainer{Config: cfg, Device: dev, Log: log, train: batches, accum: cfg.Memory.Accum,
		task: task{tokens: ds.tokens, classes: ds.classes, ignore: ds.ignore}, inShape: ds.inShape, codec: ds.codec, runID: newRunID()}
	if comm != nil {
		t.comm, t.rank, t.ranks = comm, comm.Rank(), comm.Size()
	}
	if cfg.Optim.Steps > 0 {
		t.total = cfg.Optim.Steps
	} else {
		t.total = cfg.Optim.Epochs * batches.PerEpoch()
	}
	switch {
	case cfg.Optim.Schedule == "cosine":
		t.schedule = optim.WarmupCosine{Warmup: cfg.Optim.Warmup, Total: t.total, Floor: 0.1}
	case cfg.Optim.Warmup > 0:
		t.schedule = optim.Warmup{Steps: cfg.Optim.Warmup}
	default:
		t.schedule = optim.Constant{}
	}
	for _, tech := range techniques {
		if tech.build == nil {
			continue
		}
		p, err := tech.build(t)
		if err != nil {
			return nil, err
		}
		if p != nil {
			t.parts = append(t.parts, p)
		}
	}
	fail := func(err error) (*Trainer, error) {
		t.Close()
		return nil, err
	}
	var b modelBuild
	each(t, func(h modelShaper) error { h.shapeModel(t, &b); return nil })
	model, err := buildModel(dev, cfg, ds, b)
	if err != nil {
		return nil, err
	}
	t.Model = model
	if ds.synthetic > 0 {
		t.badData = fmt.Errorf("-init %s: a vocabulary of %d tokens, fewer than the %d of the embedded synthetic task: give -data", cfg.Model.Init, cfg.Model.Vocab, ds.synthetic)
	}
	if err := each(t, func(h modelAdapter) error { return h.adaptModel(t) }); err != nil {
		return fail(err)
	}
	built := false
	err = each(t, func(h optimizerBuilder) error {
		ok, err := h.buildOptimizer(t)
		built = built || ok
		return err
	})
	if err != nil {
		return fail(err)
	}
	if !built {
		if t.Opt, err = t.newOptimizer(model.Parameters()); err != nil {
			return fail(err)
		}
	}
	steps := []func() error{
		func() error { return each(t, func(h modelFreezer) error { return h.freezeModel(t) }) },
		func() error { return each(t, func(h sharder) error { return h.shard(t) }) },
		func() error { return each(t, func(h precisionSetter) error { return h.setPrecision(t) }) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fail(err)
		}
	}
	t.upd = plainUpdate{}
	if u, ok := partAs[updater](t); ok {
		t.upd = u
	}
	var runner nn.BlockRunner
	each(t, func(h runnerWrapper) error { runner = h.wrapRunner(t, runner); return nil })
	model.SetBlockRunner(runner)
	each(t, func(h armer) error { h.arm(t); return nil })
	if cfg.Output.Resume != "" {
		if err := t.Resume(cfg.Output.Resume); err != nil {
			return fail(err)
		}
		if err := each(t, func(h resumedHook) error { return h.resumed(t) }); err != nil {
			return fail(err)
		}
	}
	return t, nil
}

// newOptimizer builds the -optim optimizer over params, by name from
// optim's registry, with the run's schedule, as every part that builds
// one (offload's over host copies, ZeRO's over shards) builds it.
func (t *Trainer) newOptimizer(params []*tensor.Tensor) (*optim.Optimizer, error) {
	c := t.Config
	o, err := optim.New(c.Optim.Name, params, optim.Settings{LR: c.Optim.LR, WeightDecay: c.Optim.WD})
	if err != nil {
		return nil, fmt.Errorf("-optim %s: %v", c.Optim.Name, err)
	}
	each(t, func(h optimizerTuner) error { h.tuneOptimizer(t, o); return nil })
	if err := o.SetSchedule(t.schedule); err != nil {
		o.Release()
		return nil, fmt.Errorf("-schedule: %v", err)
	}
	return o, nil
}

// Close releases the model's parameters, gradients and optimizer state;
// calling it again does nothing. It does not close the communicator, which
// belongs to the caller.
func (t *Trainer) Close() {
	// A part that shards the optimizer (ZeRO) releases it when it
	// closes; the others close after it is released (offload's host
	// memory is emptied once the state on it is gone).
	owned := false
	for _, p := range t.parts {
		_, c := p.(closer)
		_, s := p.(sharder)
		owned = owned || c && s
	}
	if !owned && t.Opt != nil {
		t.Opt.Release()
	}
	each(t, func(c closer) error { c.close(t); return nil })
	t.parts = nil
	t.Opt = nil
	if t.Model != nil {
		for _, p := range t.Model.Parameters() {
			p.Release()
		}
	}
	if lb, ok := t.train.(*loaderBatches); ok {
		lb.close()
	}
	if t.data != nil {
		t.data.Close()
		t.data = nil
	}
}
