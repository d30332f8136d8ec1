package train

import (
	"fmt"
	"io"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/cuda"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// NewDevice returns the device a Config names, with its memory limit.
func NewDevice(cfg Config) (device.Device, error) {
	switch cfg.Device {
	case "cpu":
		return cpu.New(cpu.Capacity(cfg.MemLimit)), nil
	case "cuda":
		d, err := cuda.New(0, cuda.MemLimit(cfg.MemLimit))
		if err != nil {
			return nil, fmt.Errorf("-device cuda: %v", err)
		}
		return d, nil
	case "meta":
		return meta.New(cfg.MemLimit), nil
	}
	return nil, fmt.Errorf("-device %s: unknown device", cfg.Device)
}

// New builds everything a Config describes on dev: data, model, optimizer,
// loss scaler, freezing and the checkpoint policy. log receives notable
// events (nil: discard).
func New(cfg Config, dev device.Device, log io.Writer) (*Trainer, error) {
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ds, err := openData(cfg)
	if err != nil {
		return nil, err
	}
	loader, err := data.NewLoader(ds.train, data.LoaderConfig{
		Batch: cfg.Batch, DropLast: true, Shuffle: true, Seed: cfg.Seed,
		Workers: cfg.Workers, Prefetch: cfg.Prefetch,
	})
	if err != nil {
		return nil, fmt.Errorf("-batch: %v", err)
	}
	if loader.Len() == 0 {
		return nil, fmt.Errorf("-batch %d: larger than the %d training examples", cfg.Batch, ds.train.Len())
	}
	t, err := assemble(cfg, dev, ds, &loaderBatches{l: loader}, log)
	if err != nil {
		return nil, err
	}
	t.val = ds.val
	return t, nil
}

// assemble builds model, optimizer and techniques for ds on dev.
func assemble(cfg Config, dev device.Device, ds *dataset, batches Batches, log io.Writer) (*Trainer, error) {
	model, err := buildModel(dev, cfg, ds)
	if err != nil {
		return nil, err
	}
	t := &Trainer{Config: cfg, Device: dev, Model: model, Log: log, train: batches, accum: cfg.Accum,
		task: task{tokens: ds.tokens, classes: ds.classes}, inShape: ds.inShape}
	fail := func(err error) (*Trainer, error) {
		t.Close()
		return nil, err
	}
	params := model.Parameters()
	switch cfg.Optim {
	case "sgd":
		t.Opt, err = optim.NewSGD(params, optim.SGD{LR: cfg.LR, Momentum: 0.9, WeightDecay: cfg.WD})
	case "adam":
		t.Opt, err = optim.NewAdam(params, optim.Adam{LR: cfg.LR, WeightDecay: cfg.WD})
	case "adamw":
		t.Opt, err = optim.NewAdamW(params, optim.AdamW{LR: cfg.LR, WeightDecay: cfg.WD})
	}
	if err != nil {
		return fail(fmt.Errorf("-optim %s: %v", cfg.Optim, err))
	}
	if cfg.Steps > 0 {
		t.total = cfg.Steps
	} else {
		t.total = cfg.Epochs * batches.PerEpoch()
	}
	var sched optim.Schedule = optim.Constant{}
	switch {
	case cfg.Schedule == "cosine":
		sched = optim.WarmupCosine{Warmup: cfg.Warmup, Total: t.total, Floor: 0.1}
	case cfg.Warmup > 0:
		sched = optim.Warmup{Steps: cfg.Warmup}
	}
	if err := t.Opt.SetSchedule(sched); err != nil {
		return fail(fmt.Errorf("-schedule: %v", err))
	}
	switch cfg.AMP {
	case "bf16":
		t.autocast = tensor.BF16
	case "fp16":
		t.autocast = tensor.F16
		t.Scaler = amp.NewGradScaler(amp.ScalerConfig{})
	}
	if t.unfreeze, err = freezeModel(model, t.Opt, cfg.Freeze); err != nil {
		return fail(err)
	}
	spec, _ := ParseCheckpoint(cfg.Checkpoint)
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
	model.SetBlockRunner(t.policy.Runner())
	if cfg.Resume != "" {
		if err := t.Resume(cfg.Resume); err != nil {
			return fail(err)
		}
	}
	return t, nil
}

// Close releases the model's parameters, gradients and optimizer state.
func (t *Trainer) Close() {
	if t.Opt != nil {
		t.Opt.Release()
	}
	if t.Model != nil {
		for _, p := range t.Model.Parameters() {
			p.Release()
		}
	}
	if lb, ok := t.train.(*loaderBatches); ok {
		lb.close()
	}
}
