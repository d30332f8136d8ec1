package offload

import (
	"errors"
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Optimizer keeps a host copy of each trainable parameter (the master
// weights, in the parameter's own dtype, counted as memory.Parameter on
// the host's allocator) for an optimizer built over those copies
// (Masters), whose state is then made on the host too (counted as
// memory.OptimizerState there). The device holds parameters, gradients
// and activations, never optimizer state, and the update is the host
// device's arithmetic.
//
// A step ends one of two ways. Step, after backward, moves the gradients
// to the host (memory.Gradient there), runs the update and writes the
// parameters back: the update follows backward. Arm, before backward,
// and Finish, after it, overlap them: each gradient moves to the host
// as soon as backward completes it and its master is updated on a
// goroutine of the host's while backward goes on with the earlier
// layers (from the second armed step on; see Arm and overlap.go). Arm
// where the update may start before every gradient exists; Step where
// it needs them all (clipping by the global norm, fp16 loss scaling).
//
// On the CPU device standing in for both sides the results are bit for
// bit those without offload, either way (the same kernels on the same
// bytes). With a CUDA model, the update is the CPU's (AVX-512 Adam, the
// same rule as CUDA's kernel, so equal within rounding of a fused
// multiply-add), and the copies go through the CUDA device's Read and
// Write: staged through pinned buffers, synchronous, on backward's
// goroutine. What overlaps backward is the host's update, not the copies.
//
// The parameters must not change on the device between steps except
// through Step or Finish (load weights with Pull afterwards).
type Optimizer struct {
	host    device.Device
	params  []*tensor.Tensor // on the device, trainable
	masters []*tensor.Tensor // their host copies
	ov      *overlap         // the overlapped step (overlap.go), from the first Arm
	stats   OverlapStats
}

// NewOptimizer makes host copies of the trainable parameters among params.
func NewOptimizer(host device.Device, params []*tensor.Tensor) (*Optimizer, error) {
	if host == nil {
		return nil, fmt.Errorf("offload: no host device")
	}
	o := &Optimizer{host: host}
	err := tensor.Catch(func() error {
		for _, p := range params {
			if !p.RequiresGrad() {
				continue
			}
			if p.Device() == host {
				return fmt.Errorf("offload: parameter %s is on the host device already", p.Name())
			}
			m := p.CopyStorage(host, memory.Parameter)
			m.SetRequiresGrad(true)
			o.params = append(o.params, p)
			o.masters = append(o.masters, m)
		}
		return nil
	})
	if err != nil {
		o.Release()
		return nil, err
	}
	return o, nil
}

// Host is the device that holds the masters and computes the update.
func (o *Optimizer) Host() device.Device { return o.host }

// Params are the device's trainable parameters, whose gradients backward
// fills: what loss scaling unscales and clipping clips before Step.
func (o *Optimizer) Params() []*tensor.Tensor { return o.params }

// Masters are the host copies, in Params' order and with their names:
// build the optimizer over them.
func (o *Optimizer) Masters() []*tensor.Tensor { return o.masters }

// Step moves each gradient to its master (freeing the device's), runs
// update (the host optimizer's Step), writes the parameters back and
// frees the host gradients. A parameter without a gradient is neither
// moved nor updated. On an error the gradients are freed on both sides
// and the parameters keep their values.
func (o *Optimizer) Step(update func() error) error {
	if o.Armed() {
		return o.abort(errors.New("offload: Step in an armed step (Finish ends it)"))
	}
	defer o.ZeroGrad()
	return tensor.Catch(func() error {
		for i, p := range o.params {
			if g := p.Grad(); g != nil {
				o.masters[i].SetGrad(g.CopyStorage(o.host, memory.Gradient))
				p.SetGrad(nil)
			}
		}
		if err := update(); err != nil {
			return err
		}
		for i, p := range o.params {
			if o.masters[i].Grad() != nil {
				p.CopyStorageFrom(o.masters[i])
			}
		}
		return nil
	})
}

// ZeroGrad frees the gradients on both sides (set-to-none); in an armed
// step it discards the step (see Arm).
func (o *Optimizer) ZeroGrad() {
	if o.Armed() {
		o.abort(nil)
		return
	}
	for i, p := range o.params {
		p.SetGrad(nil)
		o.masters[i].SetGrad(nil)
	}
}

// Pull copies the device's parameters into the masters: after weights
// were loaded on the device (resuming a run).
func (o *Optimizer) Pull() error {
	if o.Armed() {
		return errors.New("offload: Pull in an armed step")
	}
	return tensor.Catch(func() error {
		for i, p := range o.params {
			o.masters[i].CopyStorageFrom(p)
		}
		return nil
	})
}

// Release frees the masters and their gradients (the optimizer built
// over them releases its own state), discarding an armed step, and
// removes the parameters' OnGradReady hooks.
func (o *Optimizer) Release() {
	if o.ov != nil {
		if o.ov.armed {
			o.abort(nil)
		}
		if o.ov.hooked {
			for _, p := range o.params {
				p.OnGradReady(nil)
			}
		}
		o.ov = nil
	}
	for _, m := range o.masters {
		m.Release()
	}
	o.masters, o.params = nil, nil
}
