package offload

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Optimizer keeps a host copy of each trainable parameter (the master
// weights, in the parameter's own dtype, counted as memory.Parameter on
// the host's allocator) for an optimizer built over those copies
// (Masters), whose state is then made on the host too (counted as
// memory.OptimizerState there). Step moves the gradients to the host
// (memory.Gradient there), runs the update on the host device and writes
// the parameters back: the device holds parameters, gradients and
// activations, never optimizer state, and the update is the host
// device's arithmetic.
//
// On the CPU device standing in for both sides the results are bit for
// bit those without offload (the same kernels on the same bytes). With
// a CUDA model, the update is the CPU's (AVX-512 Adam, the same rule as
// CUDA's kernel, so equal within rounding of a fused multiply-add), and
// the copies go through the CUDA device's Read and Write: staged through
// pinned buffers, synchronous; they do not overlap the next backward.
//
// The parameters must not change on the device between steps except
// through Step (load weights with Pull afterwards).
type Optimizer struct {
	host    device.Device
	params  []*tensor.Tensor // on the device, trainable
	masters []*tensor.Tensor // their host copies
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

// ZeroGrad frees the gradients on both sides (set-to-none).
func (o *Optimizer) ZeroGrad() {
	for i, p := range o.params {
		p.SetGrad(nil)
		o.masters[i].SetGrad(nil)
	}
}

// Pull copies the device's parameters into the masters: after weights
// were loaded on the device (resuming a run).
func (o *Optimizer) Pull() error {
	return tensor.Catch(func() error {
		for i, p := range o.params {
			o.masters[i].CopyStorageFrom(p)
		}
		return nil
	})
}

// Release frees the masters and their gradients (the optimizer built
// over them releases its own state).
func (o *Optimizer) Release() {
	for _, m := range o.masters {
		m.Release()
	}
	o.masters, o.params = nil, nil
}
