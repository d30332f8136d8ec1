package train

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// Offloading (Config.Offload, package offload): a second device stands
// for host memory — a CPU device with an allocator of its own, or, while
// planning, a second meta device, so the plan counts the host's bytes as
// exactly as the device's. Activations moves saved activations there
// through the step scope's tensor.SavedHooks and groups them by block
// (its runner wraps the checkpoint policy's); Optimizer keeps the master
// weights and the optimizer's state there. tryStep arms the last
// backward of a step (offload.Optimizer.Arm) where the update may start
// before every gradient exists (overlapsOffload), and the step target
// below then finishes it; otherwise the target runs the update there
// after unscaling and clipping on the device.

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
	if hm, ok := dev.(device.HostMemory); ok {
		// A GPU's page-locked memory: its copies to and from the GPU
		// are DMA, without a bounce through pageable memory.
		opts = append(opts, cpu.HostMemory(hm))
	}
	return cpu.New(opts...)
}

// setupOffload makes the host device and the offloaders the Config asks
// for; with the optimizer offloaded it builds t.Opt over the host copies.
// It runs where assemble would build the optimizer.
func (t *Trainer) setupOffload(cfg Config) error {
	var err error
	t.host = hostFor(t.Device)
	if cfg.HostMemReport() != "" && t.host.Memory().Device() != "meta" {
		// The host's report, beside the device's (cmd/train writes both).
		t.host.Memory().EnableHistory(1 << 20)
		tensor.EnableAllocSites(t.host.Memory())
	}
	if cfg.OffloadsActivations() {
		if t.acts, err = offload.NewActivations(t.host, cfg.Memory.Offload.Prefetch); err != nil {
			return fmt.Errorf("-offload: %w", err)
		}
	}
	if cfg.OffloadsOptimizer() {
		if t.offOpt, err = offload.NewOptimizer(t.host, t.Model.Parameters()); err != nil {
			return fmt.Errorf("-offload: %w", err)
		}
		if t.Opt, err = newOptimizer(cfg, t.offOpt.Masters()); err != nil {
			return err
		}
	}
	return nil
}

// offloadTarget is the step target with the optimizer offloaded: the
// loss scaler unscales the device's gradients, Step runs the host's
// update.
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

// overlapsOffload reports whether this step's host update may overlap
// its last backward (offload.Optimizer.Arm): with the optimizer
// offloaded, unless the update needs every gradient first — clipping by
// the global norm, fp16 loss scaling's inf/nan check. Accumulation arms
// the last micro-batch's backward only, and a loss that is not finite
// arms nothing. Arm itself declines optimizers whose updates allocate
// (Adafactor).
func (t *Trainer) overlapsOffload() bool {
	return t.offOpt != nil && t.Scaler == nil && t.Config.Optim.Clip == 0
}

// Host is the device offloaded state lives on, or nil without -offload.
func (t *Trainer) Host() device.Device { return t.host }

// noteHostPeaks adds the host's peaks to the run's.
func (t *Trainer) noteHostPeaks() {
	if t.host == nil {
		return
	}
	st := t.host.Memory().Stats()
	r := &t.runPeaks
	r.HostTotal = max(r.HostTotal, st.Requested.Peak)
	r.HostParameter = max(r.HostParameter, st.Category(memory.Parameter).Peak)
	r.HostGradient = max(r.HostGradient, st.Category(memory.Gradient).Peak)
	r.HostOptimizerState = max(r.HostOptimizerState, st.Category(memory.OptimizerState).Peak)
	r.HostActivation = max(r.HostActivation, st.Category(memory.Activation).Peak)
}

// closeOffload releases what offloading holds on the host (after the
// optimizer released its state).
func (t *Trainer) closeOffload() {
	if t.offOpt != nil {
		t.offOpt.Release()
		t.offOpt = nil
	}
	if t.host != nil {
		t.host.Memory().EmptyCache()
	}
}
