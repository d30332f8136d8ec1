package train

import (
	"errors"
	"fmt"
	"math"
	"strings"

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
// unscaling and clipping on the device. Base keeps the frozen Linear
// weights of the model's blocks there and streams each block's to the
// device for its forward, recomputation and backward, the next block's
// copy running while a block computes (its runner wraps the others').
//
// -offload is a set: activations, optimizer, base, joined by commas;
// all is activations and optimizer, as it was before base existed. Base
// is named rather than implied by all: it copies the base over three
// times a step (forward, recomputation, backward; twice where a block's
// recomputation and backward share a fetch) and pays only where the
// device, not the host, is short (-fit adds it after all, and never on a
// device whose memory is the host's, where it saves nothing).
var offloading = &technique{
	name:  "offload",
	group: "memory",
	doc:   "state in host memory: activations saved for backward (brought back block by block), the master weights and optimizer state with the update on the host (overlapping backward where it may), or the frozen base's Linear weights (streamed to the device block by block, the next block's copy beside the current block's work: at most two blocks' weights on the device); exact, every step copies",
	flags: func(f *Flags, c *Config) {
		o := &c.Memory.Offload
		f.stringVar(&o.Mode, "offload", "keep state in host memory: off, activations (saved for backward, brought back block by block), optimizer (state and master weights; the update runs on the CPU, overlapping backward unless -clip or -amp fp16), all (both), or base (the frozen Linear weights of -lora's base or -freeze's layers, streamed to the device block by block for forward, recomputation and backward); several joined by commas (all,base)")
		f.intVar(&o.Prefetch, "offload-prefetch", "with -offload activations: blocks brought back ahead of the one backward is in (on the CPU by a goroutine of their own; 0 gives the lowest peak)")
	},
	features: []feature{
		{name: "-offload activations", on: func(c *Config) bool { return c.OffloadsActivations() }, flag: offloadFlag},
		{name: "-offload optimizer", on: func(c *Config) bool { return c.OffloadsOptimizer() }, flag: offloadFlag},
		{name: "-offload base", on: func(c *Config) bool { return c.OffloadsBase() }, flag: offloadFlag},
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
		// The streamed weights are parked on the host as the frozen
		// parameters they are when the run starts.
		{"-offload base", "-zero 3", "ZeRO-3 shards the same parameters and gathers them block by block itself (use -zero 1 or 2, which shard the trainable ones)"},
		{"-offload base", "-unfreeze-at", "a streamed weight lives on the host between its block's uses, and one that trains again would need its gradient and update there"},
	},
	check: func(c *Config) error {
		mode := c.Memory.Offload.Mode
		if _, err := c.offloadSet(); err != nil {
			return bad("offload", mode, err.Error())
		}
		if c.Memory.Offload.Prefetch < 0 {
			return fmt.Errorf("-offload-prefetch %d: want 0 or more blocks", c.Memory.Offload.Prefetch)
		}
		if !c.OffloadsBase() {
			return nil
		}
		switch {
		case c.Memory.LoRA.Rank == 0 && len(c.Memory.Freeze) == 0:
			return bad("offload", mode, "base streams the frozen Linear weights of -lora's base or of the layers -freeze freezes, and nothing is frozen")
		case c.Generate.Tokens > 0:
			return bad("offload", mode, "generation runs the blocks through the KV cache, outside the block runner that streams their weights (generate without -offload base)")
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
		if c.OffloadsBase() {
			out = append(out, "-offload base")
		}
		return out
	},
	fit: &fitAxis{
		// Last of all: exact, but every step copies the activations or
		// the gradients and parameters over and back. Everything the
		// run's other settings allow (activations alone where the
		// optimizer cannot be offloaded, as under -dist); then, with a
		// frozen base, the base streamed too — on a device whose memory
		// is the host's it would only add the blocks in flight.
		tier: 3,
		options: func(c Config) []Config {
			out := []Config{c}
			if !c.offloads() {
				c.Memory.Offload.Mode = "all"
				if c.checkTechniques() != nil {
					c.Memory.Offload.Mode = "activations"
				}
				out = append(out, c)
			}
			if c.OffloadsBase() || device.OnHost(c.Device.Name) || c.Memory.LoRA.Rank == 0 && len(c.Memory.Freeze) == 0 {
				return out
			}
			c.Memory.Offload.Mode += ",base"
			if c.checkTechniques() != nil {
				return out
			}
			return append(out, c)
		},
	},
	build: func(t *Trainer) (any, error) {
		if !t.Config.offloads() {
			return nil, nil
		}
		p := &offloadPart{}
		switch c := t.Config; {
		case c.OffloadsOptimizer() && c.OffloadsBase():
			return offloadBaseOptimizerPart{&offloadOptimizerPart{p}}, nil
		case c.OffloadsOptimizer():
			return &offloadOptimizerPart{p}, nil
		case c.OffloadsBase():
			return offloadBasePart{p}, nil
		}
		return p, nil
	},
}

func offloadFlag(c *Config) string { return flagOf("offload", c.Memory.Offload.Mode) }

// offloads reports whether -offload moves anything.
func (c *Config) offloads() bool {
	return c.Memory.Offload.Mode != "" && c.Memory.Offload.Mode != "off"
}

// offloadSet is what -offload moves: "" or off moves nothing; otherwise
// a comma-separated set of activations, optimizer and base, all being
// activations and optimizer.
func (c Config) offloadSet() (map[string]bool, error) {
	mode := c.Memory.Offload.Mode
	set := map[string]bool{}
	if mode == "" || mode == "off" {
		return set, nil
	}
	all := false
	for _, v := range strings.Split(mode, ",") {
		switch v {
		case "activations", "optimizer", "base":
			if set[v] {
				if all && v != "base" {
					return set, errors.New("all is activations and optimizer: name all or them, not both")
				}
				return set, fmt.Errorf("%s named twice", v)
			}
			set[v] = true
		case "all":
			if all || set["activations"] || set["optimizer"] {
				return set, errors.New("all is activations and optimizer: name all or them, not both")
			}
			all, set["activations"], set["optimizer"] = true, true, true
		case "off":
			return set, errors.New("off moves nothing: name it alone")
		default:
			return set, fmt.Errorf("unknown %q (want off, activations, optimizer, all or base, or several joined by commas: all,base)", v)
		}
	}
	return set, nil
}

// offloadsWhat reports whether -offload moves what (the set's name).
func (c Config) offloadsWhat(what string) bool {
	set, _ := c.offloadSet()
	return set[what]
}

// OffloadsActivations reports whether -offload moves activations.
func (c Config) OffloadsActivations() bool { return c.offloadsWhat("activations") }

// OffloadsOptimizer reports whether -offload moves the optimizer.
func (c Config) OffloadsOptimizer() bool { return c.offloadsWhat("optimizer") }

// OffloadsBase reports whether -offload streams the frozen base from
// host memory.
func (c Config) OffloadsBase() bool { return c.offloadsWhat("base") }

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
// activations' offloader, with the optimizer offloaded its masters, and
// with the base streamed its weights.
type offloadPart struct {
	host  device.Device
	acts  *offload.Activations
	opt   *offload.Optimizer
	base  *offload.Base
	model Model
	sofar float64 // the step's loss as accumulate.Window sums it, for overlaps
}

// offloading returns the part itself, through the types that embed it.
func (p *offloadPart) offloading() *offloadPart { return p }

// buildOptimizer makes the host device and the offloaders; with the
// optimizer offloaded it builds t.Opt over the host copies.
func (p *offloadPart) buildOptimizer(t *Trainer) (bool, error) {
	cfg := t.Config
	if p.host == nil {
		p.host = hostFor(t.Device)
	}
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

// shapeModel has a quantized base streamed from the host (-offload base
// with -base nf4 or int8) made parked: each frozen weight of a block goes
// to the host as soon as it is quantized, so the device never holds the
// base whole, not even while the model is built (a 70B's nf4 base is
// larger than the card it trains on).
func (p *offloadPart) shapeModel(t *Trainer, b *modelBuild) {
	if !t.Config.OffloadsBase() || t.Config.baseQuant() == device.Invalid {
		return
	}
	p.host = hostFor(t.Device)
	b.park = func(w *tensor.Tensor) error { return w.Park(p.host) }
}

// setPrecision parks the frozen Linear weights of the model's blocks on
// the host (-offload base): once they are frozen and held in the dtype
// the run keeps them in (-base's, or autocast's), after the techniques
// before this one set that.
func (p *offloadPart) setPrecision(t *Trainer) error {
	if !t.Config.OffloadsBase() {
		return nil
	}
	m, ok := t.Model.(interface{ Blocks() []nn.Module })
	if !ok {
		return fmt.Errorf("-offload base: -model %s has no blocks to stream the weights of", t.Config.Model.Name)
	}
	linear := nn.LinearWeights(t.Model)
	base, err := offload.NewBase(p.host, m.Blocks(), func(w *tensor.Tensor) bool { return linear[w] && !w.RequiresGrad() })
	if err != nil {
		return fmt.Errorf("-offload base: %w", err)
	}
	p.base, p.model = base, t.Model
	if base.Blocks() == 0 {
		t.logf("train: warning: -offload base: no block has a frozen Linear weight to stream")
		return nil
	}
	t.logf("-offload base: the frozen Linear weights of %d blocks (%s) in host memory, streamed to the device a block at a time (%s the largest)",
		base.Blocks(), memory.FormatBytes(base.Bytes()), memory.FormatBytes(base.MaxBlockBytes()))
	return nil
}

// wrapRunner: the base's runner outermost, so that a block's weights are
// on the device around everything the other runners do with it.
func (p *offloadPart) wrapRunner(_ *Trainer, r nn.BlockRunner) nn.BlockRunner {
	if p.acts != nil {
		r = p.acts.Runner(r)
	}
	if p.base != nil {
		r = p.base.Runner(r)
	}
	return r
}

// beforeMicroBatch starts the host's peak afresh with each step, as the
// trainer starts the device's: a parked weight reads on the host, so a
// save between steps (a -freeze run's streamed bf16 weights, widened to
// f64 there) makes host temporaries that are not the step's.
func (p *offloadPart) beforeMicroBatch(_ *Trainer, mb microBatch) error {
	if p.base != nil && mb.index == 0 {
		p.host.Memory().ResetPeak()
	}
	return nil
}

// beforeForward starts the base's pass: the first block's fetch.
func (p *offloadPart) beforeForward(*Trainer) {
	if p.base == nil {
		return
	}
	if err := p.base.BeforeForward(); err != nil {
		panic(&tensor.Error{Op: "offload base", Msg: err.Error()})
	}
}

// afterBackward sends home what the step's last backward left on the
// device (the first block, whose input needs no gradient), before the
// update.
func (p *offloadPart) afterBackward(*Trainer, float64) (bool, error) {
	if p.base == nil {
		return false, nil
	}
	return false, p.base.Settle()
}

// abortStep sends home what a failed step left on the device.
func (p *offloadPart) abortStep(_ *Trainer, err error) error {
	if p.base == nil {
		return err
	}
	return errors.Join(err, p.base.Settle())
}

// afterEvaluate sends home what an evaluation prefetched.
func (p *offloadPart) afterEvaluate(*Trainer) {
	if p.base != nil {
		_ = p.base.Settle()
	}
}

// sampleable: the evaluation's greedy sample runs the blocks through the
// KV cache, outside the runner that streams the base.
func (p *offloadPart) sampleable() bool { return p.base == nil }

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
// gradients and state and the streamed base, which more micro-batches do
// not shrink; and a step whose host update had begun cannot be retried.
func (p *offloadPart) vetoRetry(t *Trainer, err error) error {
	var oom *memory.OOMError
	if errors.As(err, &oom) && oom.Device == "host" && !t.Config.OffloadsActivations() {
		return fmt.Errorf("step %d: %w (host memory holds %s, which more micro-batches do not shrink)", t.step+1, err, p.hostHolds())
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

// hostHolds says what the host holds besides activations, for messages.
func (p *offloadPart) hostHolds() string {
	var what []string
	if p.opt != nil {
		what = append(what, "the offloaded optimizer's master weights, gradients and state")
	}
	if p.base != nil {
		what = append(what, "the streamed base's weights")
	}
	if len(what) == 0 {
		return "nothing that micro-batches change"
	}
	return strings.Join(what, " and ")
}

// close releases what offloading holds on the host (after the optimizer
// released its state). The streamed weights own their host memory (a
// parked storage does): they are released here, once nothing is in
// flight, so that the host's cache can be emptied of them too — the
// model is done with once its trainer closes.
func (p *offloadPart) close(*Trainer) {
	if p.opt != nil {
		p.opt.Release()
		p.opt = nil
	}
	if p.base != nil {
		_ = p.base.Release()
		for _, w := range p.base.Weights() {
			w.Release()
		}
		p.base = nil
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

// offloadBasePart is offloadPart with the base streamed, and
// offloadBaseOptimizerPart offloadOptimizerPart with it: they hold the
// frozen weights block by block, so an export that reads the model on
// the device (hf's, merging LoRA's adapters) fetches them first
// (weightHolder). A checkpoint needs nothing of them: a parked weight
// reads and writes as a host tensor.
type (
	offloadBasePart          struct{ *offloadPart }
	offloadBaseOptimizerPart struct{ *offloadOptimizerPart }
)

func (p offloadBasePart) gatherAll(f func() error) error { return p.base.FetchAll(f) }
func (p offloadBasePart) gatherEach(f func([]*tensor.Tensor) error) error {
	return p.baseGatherEach(f)
}
func (p offloadBasePart) loadFull(value func(*tensor.Tensor) []float32) error {
	return p.baseLoadFull(value)
}
func (p offloadBaseOptimizerPart) gatherAll(f func() error) error { return p.base.FetchAll(f) }
func (p offloadBaseOptimizerPart) gatherEach(f func([]*tensor.Tensor) error) error {
	return p.baseGatherEach(f)
}
func (p offloadBaseOptimizerPart) loadFull(value func(*tensor.Tensor) []float32) error {
	return p.baseLoadFull(value)
}

// baseGatherEach hands a save the streamed weights where they are, on the
// host (the rest it reads from the model).
func (p *offloadPart) baseGatherEach(f func([]*tensor.Tensor) error) error {
	if err := p.base.Settle(); err != nil {
		return err
	}
	return f(p.base.Weights())
}

// baseLoadFull writes a checkpoint's values into the model's parameters,
// the streamed ones on the host; a parameter the checkpoint lacks (LoRA's
// base) stays as it is.
func (p *offloadPart) baseLoadFull(value func(*tensor.Tensor) []float32) error {
	if err := p.base.Settle(); err != nil {
		return err
	}
	for _, w := range p.model.Parameters() {
		if v := value(w); v != nil {
			if err := w.SetFloat32s(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// offloadHolder is a part that is, or embeds, offloadPart.
type offloadHolder interface{ offloading() *offloadPart }

// Host is the device offloaded state lives on, or nil without -offload.
func (t *Trainer) Host() device.Device {
	if p := t.offloader(); p != nil {
		return p.host
	}
	return nil
}

// offloader is the run's offloading part, nil without -offload.
func (t *Trainer) offloader() *offloadPart {
	if p, ok := partAs[offloadHolder](t); ok {
		return p.offloading()
	}
	return nil
}
