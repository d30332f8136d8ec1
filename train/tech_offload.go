package train

import (
	"errors"
	"fmt"
	"math"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// offloading keeps state in host memory (package offload): a second
// device stands for host memory — a CPU device with an allocator of its
// own, or, while planning, a second meta device, so the plan counts the
// host's bytes as exactly as the device's. Activations moves saved
// activations there through the step scope's tensor.SavedHooks and
// groups them by block (its runner wraps the checkpoint policy's);
// Optimizer keeps the master weights and the optimizer's state there.
// The last backward of a step is armed (offload.Optimizer.Arm) where the
// update may start before every gradient exists (overlaps), and the
// update then finishes it; otherwise the update runs there after
// unscaling and clipping on the device.
var offloading = &technique{
	name:  "offload",
	group: "memory",
	doc:   "state in host memory: activations saved for backward (brought back block by block), or the master weights and optimizer state with the update on the host (overlapping backward where it may); exact, every step copies",
	flags: func(f *Flags, c *Config) {
		o := &c.Memory.Offload
		f.stringVar(&o.Mode, "offload", "keep state in host memory: off, activations (saved for backward, brought back block by block), optimizer (state and master weights; the update runs on the CPU, overlapping backward unless -clip or -amp fp16) or all")
		f.intVar(&o.Prefetch, "offload-prefetch", "with -offload activations: blocks brought back ahead of the one backward is in (on the CPU by a goroutine of their own; 0 gives the lowest peak)")
	},
	features: []feature{
		{name: "-offload activations", on: func(c *Config) bool { return c.OffloadsActivations() }, flag: offloadFlag},
		{name: "-offload optimizer", on: func(c *Config) bool { return c.OffloadsOptimizer() }, flag: offloadFlag},
		{
			name: "-offload-prefetch",
			on:   func(c *Config) bool { return c.Memory.Offload.Prefetch > 0 },
			flag: func(c *Config) string { return flagOf("offload-prefetch", c.Memory.Offload.Prefetch) },
		},
	},
	needs: []rule{
		{"-offload-prefetch", "-offload activations", "it brings offloaded activations back ahead of backward"},
	},
	// The host optimizer is built over host copies of the trainable
	// parameters, once: what changes that set, shards it or updates on
	// the device is refused rather than half supported.
	refuses: []rule{
		{"-offload optimizer", "-step-in-backward", "the update runs on the host after backward"},
		{"-offload optimizer", "-dist", "the optimizer is not offloaded under -dist yet (use -zero to shard it, or -offload activations)"},
		{"-offload optimizer", "-freeze", "the optimizer is not offloaded with -freeze yet (use -offload activations)"},
		{"-offload optimizer", "-weights bf16", "the optimizer is not offloaded with -weights bf16 yet (use -offload activations)"},
	},
	check: func(c *Config) error {
		switch c.Memory.Offload.Mode {
		case "", "off", "activations", "optimizer", "all":
		default:
			return bad("offload", c.Memory.Offload.Mode, "unknown (want off, activations, optimizer or all)")
		}
		if c.Memory.Offload.Prefetch < 0 {
			return fmt.Errorf("-offload-prefetch %d: want 0 or more blocks", c.Memory.Offload.Prefetch)
		}
		return nil
	},
	describe: func(c *Config) string {
		if !c.offloads() {
			return ""
		}
		s := "offload " + c.Memory.Offload.Mode
		if c.OffloadsActivations() {
			s += fmt.Sprintf(" (prefetch %d)", c.Memory.Offload.Prefetch)
		}
		return s
	},
	tried: func(c *Config) []string {
		var out []string
		if c.OffloadsActivations() {
			out = append(out, "-offload activations")
		}
		if c.OffloadsOptimizer() {
			out = append(out, "-offload optimizer")
		}
		return out
	},
	fit: &fitAxis{
		// Last of all: exact, but every step copies the activations or
		// the gradients and parameters over and back. Everything the
		// run's other settings allow (activations alone where the
		// optimizer cannot be offloaded, as under -dist).
		tier: 3,
		options: func(c Config) []Config {
			out := []Config{c}
			if c.offloads() {
				return out
			}
			c.Memory.Offload.Mode = "all"
			if c.checkTechniques() != nil {
				c.Memory.Offload.Mode = "activations"
			}
			return append(out, c)
		},
	},
	build: func(t *Trainer) (any, error) {
		if !t.Config.offloads() {
			return nil, nil
		}
		p := &offloadPart{}
		if t.Config.OffloadsOptimizer() {
			return &offloadOptimizerPart{p}, nil
		}
		return p, nil
	},
}

func offloadFlag(c *Config) string { return flagOf("offload", c.Memory.Offload.Mode) }

// offloads reports whether -offload moves anything.
func (c *Config) offloads() bool {
	return c.Memory.Offload.Mode != "" && c.Memory.Offload.Mode != "off"
}

// offloadsActivations reports whether -offload moves activations.
func (c Config) OffloadsActivations() bool {
	return c.Memory.Offload.Mode == "activations" || c.Memory.Offload.Mode == "all"
}

// offloadsOptimizer reports whether -offload moves the optimizer.
func (c Config) OffloadsOptimizer() bool {
	return c.Memory.Offload.Mode == "optimizer" || c.Memory.Offload.Mode == "all"
}

// hostOptions are added to the host device's (tests limit its capacity).
var hostOptions []cpu.Option

// hostFor returns the device offloaded state lives on for a run on dev:
// a CPU device (on the GPU's pinned memory when dev offers it), or a
// meta device while planning.
func hostFor(dev device.Device) device.Device {
	// The allocator's device, not dev.Name(): a plan for a device that
	// lacks capabilities runs on a meta device behind device.Without,
	// whose name says what it hides.
	if dev.Memory().Device() == "meta" {
		return meta.New(0)
	}
	opts := append([]cpu.Option{cpu.Label("host")}, hostOptions...) // its out-of-memory errors say "device host"
	if hm, ok := device.As[device.HostMemory](dev); ok {
		// A GPU's page-locked memory: its copies to and from the GPU
		// are DMA, without a bounce through pageable memory.
		opts = append(opts, cpu.HostMemory(hm))
	}
	return cpu.New(opts...)
}

// offloadPart is what -offload keeps on the host: the host device, the
// activations' offloader and, with the optimizer offloaded, its masters.
type offloadPart struct {
	host  device.Device
	acts  *offload.Activations
	opt   *offload.Optimizer
	sofar float64 // the step's loss as accumulate.Window sums it, for overlaps
}

// buildOptimizer makes the host device and the offloaders; with the
// optimizer offloaded it builds t.Opt over the host copies.
func (p *offloadPart) buildOptimizer(t *Trainer) (bool, error) {
	cfg := t.Config
	p.host = hostFor(t.Device)
	if cfg.HostMemReport() != "" && p.host.Memory().Device() != "meta" {
		// The host's report, beside the device's (cmd/train writes both).
		p.host.Memory().EnableHistory(1 << 20)
		tensor.EnableAllocSites(p.host.Memory())
	}
	var err error
	if cfg.OffloadsActivations() {
		if p.acts, err = offload.NewActivations(p.host, cfg.Memory.Offload.Prefetch); err != nil {
			return false, fmt.Errorf("-offload: %w", err)
		}
	}
	if !cfg.OffloadsOptimizer() {
		return false, nil
	}
	if p.opt, err = offload.NewOptimizer(p.host, t.Model.Parameters()); err != nil {
		return false, fmt.Errorf("-offload: %w", err)
	}
	if t.Opt, err = t.newOptimizer(p.opt.Masters()); err != nil {
		return false, err
	}
	return true, nil
}

func (p *offloadPart) wrapRunner(_ *Trainer, r nn.BlockRunner) nn.BlockRunner {
	if p.acts == nil {
		return r
	}
	return p.acts.Runner(r)
}

func (p *offloadPart) scopeOptions(_ *Trainer, training bool) []tensor.ScopeOption {
	if !training || p.acts == nil {
		return nil
	}
	return []tensor.ScopeOption{tensor.SaveHooks(p.acts)}
}

// overlaps reports whether this step's host update may overlap its last
// backward (offload.Optimizer.Arm): with the optimizer offloaded, unless
// the update needs every gradient first — clipping by the global norm,
// fp16 loss scaling's inf/nan check. Accumulation arms the last
// micro-batch's backward only, and a loss that is not finite arms
// nothing. Arm itself declines optimizers whose updates allocate
// (Adafactor).
func (p *offloadPart) overlaps(t *Trainer) bool {
	return p.opt != nil && t.Scaler == nil && t.Config.Optim.Clip == 0
}

// afterLoss arms the host update during the step's last backward, when
// the step is one that updates: a loss that is not finite is skipped or
// fails after a backward left unarmed.
func (p *offloadPart) afterLoss(t *Trainer, mb microBatch, loss *tensor.Tensor) error {
	if !p.overlaps(t) {
		return nil
	}
	if mb.index == 0 {
		p.sofar = 0
	}
	p.sofar += mb.Weight * loss.Item()
	if mb.last && !math.IsNaN(p.sofar) && !math.IsInf(p.sofar, 0) {
		return p.opt.Arm(t.Opt)
	}
	return nil
}

// tearsMidStep: an overlapped update runs during the last backward.
func (p *offloadPart) tearsMidStep(t *Trainer) bool { return p.overlaps(t) }

// vetoRetry: host memory holds the offloaded optimizer's masters,
// gradients and state, which more micro-batches do not shrink; and a
// step whose host update had begun cannot be retried.
func (p *offloadPart) vetoRetry(t *Trainer, err error) error {
	var oom *memory.OOMError
	if errors.As(err, &oom) && oom.Device == "host" && !t.Config.OffloadsActivations() {
		return fmt.Errorf("step %d: %w (host memory holds the offloaded optimizer's master weights, gradients and state, which more micro-batches do not shrink)", t.step+1, err)
	}
	if p.opt != nil && p.opt.Torn() {
		return fmt.Errorf("step %d: %w (the host had begun this step's update during backward, so it cannot be retried in more micro-batches)", t.step+1, err)
	}
	return nil
}

// resumed: the weights were loaded on the device; the host's copies
// follow.
func (p *offloadPart) resumed(*Trainer) error {
	if p.opt == nil {
		return nil
	}
	return p.opt.Pull()
}

func (p *offloadPart) summarize(*Summary) {}

// notePeaks adds the host's peaks to the run's.
func (p *offloadPart) notePeaks(r *PeakBytes) {
	st := p.host.Memory().Stats()
	r.HostTotal = max(r.HostTotal, st.Requested.Peak)
	r.HostParameter = max(r.HostParameter, st.Category(memory.Parameter).Peak)
	r.HostGradient = max(r.HostGradient, st.Category(memory.Gradient).Peak)
	r.HostOptimizerState = max(r.HostOptimizerState, st.Category(memory.OptimizerState).Peak)
	r.HostActivation = max(r.HostActivation, st.Category(memory.Activation).Peak)
}

// close releases what offloading holds on the host (after the optimizer
// released its state).
func (p *offloadPart) close(*Trainer) {
	if p.opt != nil {
		p.opt.Release()
		p.opt = nil
	}
	if p.host != nil {
		p.host.Memory().EmptyCache()
	}
}

// offloadOptimizerPart is offloadPart with the optimizer offloaded: it
// owns the update.
type offloadOptimizerPart struct{ *offloadPart }

func (p *offloadOptimizerPart) reduce(*Trainer) error { return nil }

// target is the step target with the optimizer offloaded: the loss
// scaler unscales the device's gradients, Step runs the host's update
// (t.Opt, over the host copies).
func (p *offloadOptimizerPart) target(t *Trainer) amp.Optimizer { return offloadTarget{p.opt, t.Opt} }

// clipGradNorm: the gradients are the device's until the step moves
// them.
func (p *offloadOptimizerPart) clipGradNorm(_ *Trainer, max float64) (float64, error) {
	return optim.ClipGradNorm(p.opt.Params(), max)
}

// gradNorm: after an overlapped backward the gradients are the masters'.
func (p *offloadOptimizerPart) gradNorm(*Trainer) (float64, error) {
	return optim.GradNorm(p.opt.GradHolders())
}

// zeroGrad waits for the host's updates first: they read the masters'
// gradients that t.Opt's ZeroGrad frees.
func (p *offloadOptimizerPart) zeroGrad(t *Trainer) {
	p.opt.ZeroGrad()
	t.Opt.ZeroGrad()
}

func (p *offloadOptimizerPart) exportState(t *Trainer) (optim.State, error)  { return t.Opt.Export() }
func (p *offloadOptimizerPart) importState(t *Trainer, st optim.State) error { return t.Opt.Import(st) }

type offloadTarget struct {
	o   *offload.Optimizer
	opt *optim.Optimizer
}

func (o offloadTarget) Params() []*tensor.Tensor { return o.o.Params() }

func (o offloadTarget) Step() error {
	if o.o.Armed() {
		return o.o.Finish()
	}
	return o.o.Step(o.opt.Step)
}

// Host is the device offloaded state lives on, or nil without -offload.
func (t *Trainer) Host() device.Device {
	if p, ok := partAs[*offloadPart](t); ok {
		return p.host
	}
	if p, ok := partAs[*offloadOptimizerPart](t); ok {
		return p.host
	}
	return nil
}

// offloader is the run's offloading part, nil without -offload.
func (t *Trainer) offloader() *offloadPart {
	if p, ok := partAs[*offloadPart](t); ok {
		return p
	}
	if p, ok := partAs[*offloadOptimizerPart](t); ok {
		return p.offloadPart
	}
	return nil
}
