package train

import (
	"context"
	"fmt"
	"io"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/parallel"
)

// The planner predicts the peak memory of a configuration without
// training: it builds the same model, optimizer and techniques on the meta
// device — whose allocator accounts every byte exactly as a real device's
// does but whose kernels do nothing — and runs real training steps on
// batches of the right shape. Because the same allocator sees the same
// requests in the same order, the prediction is the measured peak, not an
// estimate; it takes milliseconds even for models far larger than the
// machine.

// planSteps is how many steps a plan traces: the first creates optimizer
// state; the next ones show the steady state (and let a Budget checkpoint
// policy settle).
const planSteps = 3

// shapeBatches delivers zero-filled batches shaped like a dataset's.
type shapeBatches struct {
	ds  *dataset
	cfg Config
	pos data.Position
}

func (s *shapeBatches) Next(context.Context) (*data.Batch, error) {
	b := &data.Batch{Epoch: s.pos.Epoch, Index: s.pos.Batch, Indices: make([]int, s.cfg.Optim.Batch)}
	per := 1
	for _, d := range s.ds.inShape {
		per *= d
	}
	b.InputShape = append([]int{s.cfg.Optim.Batch}, s.ds.inShape...)
	if s.ds.tokens {
		b.Tokens = make([]int32, s.cfg.Optim.Batch*per)
		b.Targets = make([]int32, s.cfg.Optim.Batch*per)
		b.TargetShape = []int{s.cfg.Optim.Batch, per}
		if s.ds.packed {
			// What positions cost does not depend on their values: one
			// example a row.
			b.Positions = make([]int32, s.cfg.Optim.Batch*per)
			for i := range b.Positions {
				b.Positions[i] = int32(i % per)
			}
		}
	} else {
		b.Inputs = make([]float32, s.cfg.Optim.Batch*per)
		b.Targets = make([]int32, s.cfg.Optim.Batch)
		b.TargetShape = []int{s.cfg.Optim.Batch}
	}
	s.pos.Batch++
	return b, nil
}

func (s *shapeBatches) Position() data.Position    { return s.pos }
func (s *shapeBatches) Seek(p data.Position) error { s.pos = p; return nil }
func (s *shapeBatches) PerEpoch() int              { return max(1, s.ds.train.Len()/s.cfg.Optim.Batch) }

// Plan predicts the peak bytes by category of training with cfg, or with
// Generate set, of generating: the model as -generate builds it, then
// the prompt's forward and one token's at a time through the KV cache
// (category kv_cache), which grows to prompt + Generate tokens.
func Plan(cfg Config) (PeakBytes, error) { return PlanContext(context.Background(), cfg) }

// PlanContext is Plan, stopped (with an error wrapping ctx's) when ctx is
// done.
func PlanContext(ctx context.Context, cfg Config) (PeakBytes, error) {
	cfg, _, err := cfg.ApplyInit()
	if err != nil {
		return PeakBytes{}, err
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return PeakBytes{}, err
	}
	ds, err := openData(cfg)
	if err != nil {
		return PeakBytes{}, err
	}
	return planWith(ctx, cfg, ds)
}

// planned, when set (by tests), sees every configuration planned.
var planned func(Config)

// planWith plans cfg on ds; a cancelled ctx stops it between ops.
func planWith(ctx context.Context, cfg Config, ds *dataset) (PeakBytes, error) {
	p, _, err := planState(ctx, cfg, ds)
	return p, err
}

// planState is planWith, with the bytes of parameters and optimizer state
// held after the last step: what every moment of a later step holds at
// least (a lower bound of the peak), and the same for every configuration
// whose parameters and optimizer state are the same (-fit skips those
// when it exceeds the budget).
func planState(ctx context.Context, cfg Config, ds *dataset) (PeakBytes, int64, error) {
	if planned != nil {
		planned(cfg)
	}
	cfg.Output.Resume, cfg.Output.Save, cfg.Output.Metrics, cfg.Output.Quiet = "", "", "", true
	// The meta device has every capability; it hides those the target
	// device lacks and those the run leaves out, so that it takes the
	// same paths, and allocates the same bytes, as the run will.
	var (
		dev device.Device = meta.New(0)
		err error
	)
	if hide := append(device.Lacks(cfg.Device.Name), cfg.Device.Without...); len(hide) > 0 {
		dev = device.Without(dev, hide...)
	}
	// With -dist and -ranks N the plan is rank 0's (whose shards are the
	// largest): a communicator that stands for N ranks and exchanges
	// nothing, since the meta device computes no values to exchange.
	var comm parallel.Comm
	if cfg.Parallel.Engine != "off" && cfg.Parallel.Ranks > 0 {
		if comm, err = parallel.NewMeta(0, cfg.Parallel.Ranks); err != nil {
			return PeakBytes{}, 0, err
		}
	}
	mem := dev.Memory()
	stop := newStopper(ctx, mem)
	defer stop.close()
	stop.arm()
	t, err := assemble(cfg, dev, ds, &shapeBatches{ds: ds, cfg: cfg}, comm, nil)
	if err != nil {
		return PeakBytes{}, 0, err
	}
	defer t.Close()
	if cfg.Generate.Tokens > 0 {
		// The meta device's logits are zeros: greedy decoding picks token
		// 0 each time, and every token costs what any other would.
		mem.ResetPeak()
		if _, err := t.GenerateText(); err != nil {
			return PeakBytes{}, 0, err
		}
		t.notePeaks(mem.Stats())
		return t.runPeaks, 0, nil
	}
	for i := 0; i < planSteps; i++ {
		b, _ := t.train.Next(context.Background())
		mem.ResetPeak()
		if _, err := t.tryStep(b); err != nil {
			return PeakBytes{}, 0, err
		}
		t.step++
		t.notePeaks(mem.Stats())
	}
	st := mem.Stats()
	return t.runPeaks, st.Category(memory.Parameter).Current + st.Category(memory.OptimizerState).Current, nil
}

// WritePlan renders a prediction as a table.
func WritePlan(w io.Writer, cfg Config, p PeakBytes) {
	fmt.Fprintf(w, "memfit plan: %s", modelKey(cfg))
	if cfg.Generate.Tokens > 0 {
		fmt.Fprintf(w, "; generate %d tokens after -prompt", cfg.Generate.Tokens)
	}
	if d := describePlan(&cfg); d != "" {
		fmt.Fprintf(w, "; %s", d)
	}
	fmt.Fprintf(w, "\n%-16s %14s\n", "category", "predicted peak")
	rows := []struct {
		name string
		v    int64
	}{
		{memory.Parameter.String(), p.Parameter},
		{memory.Gradient.String(), p.Gradient},
		{memory.OptimizerState.String(), p.OptimizerState},
		{memory.Activation.String(), p.Activation},
		{memory.Temporary.String(), p.Temporary},
		{memory.Data.String(), p.Data},
	}
	if p.KVCache > 0 {
		rows = append(rows, struct {
			name string
			v    int64
		}{memory.KVCache.String(), p.KVCache})
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-16s %14s\n", r.name, memory.FormatBytes(r.v))
	}
	if cfg.Parallel.Engine != "off" && cfg.Parallel.Ranks > 0 {
		// What ZeRO shards, at its peak together (for ZeRO-3 less than
		// the sum of the rows above: a block is whole only in its turn).
		fmt.Fprintf(w, "%-16s %14s  (parameters + gradients + optimizer state, at one moment)\n", "model state", memory.FormatBytes(p.ModelState))
	}
	fmt.Fprintf(w, "%-16s %14s  (peak of the sum; categories peak at different times)\n", "total", memory.FormatBytes(p.Total))
	if p.HostTotal == 0 {
		return
	}
	fmt.Fprintf(w, "host memory (-offload %s)\n", cfg.Memory.Offload.Mode)
	for _, r := range []struct {
		name string
		v    int64
	}{
		{memory.Parameter.String(), p.HostParameter},
		{memory.Gradient.String(), p.HostGradient},
		{memory.OptimizerState.String(), p.HostOptimizerState},
		{memory.Activation.String(), p.HostActivation},
	} {
		fmt.Fprintf(w, "%-16s %14s\n", r.name, memory.FormatBytes(r.v))
	}
	fmt.Fprintf(w, "%-16s %14s\n", "total", memory.FormatBytes(p.HostTotal))
	if device.OnHost(cfg.Device.Name) {
		fmt.Fprintf(w, "%-16s %14s  (device and host: the same memory on -device %s)\n", "together", memory.FormatBytes(need(cfg, p)), cfg.Device.Name)
		return
	}
	// The host's budget beside the device's: -fit's (-fit-host), or the
	// machine's, which a run's host side must fit (Preflight).
	hb := hostBudget(cfg)
	if cfg.Fit == 0 && cfg.FitHost == 0 && hb > 0 {
		why := "this machine's available memory less a margin; a run whose one-example step needs more is refused at start"
		if p.HostTotal > hb {
			why = "this machine's available memory less a margin; the plan's host side is over it by " + memory.FormatBytes(p.HostTotal-hb)
		}
		fmt.Fprintf(w, "%-16s %14s  (%s)\n", "available", memory.FormatBytes(hb), why)
	} else if hb > 0 {
		fmt.Fprintf(w, "%-16s %14s  (-fit's host budget: %s)\n", "budget", memory.FormatBytes(hb), hostBudgetSource(cfg))
	}
}
