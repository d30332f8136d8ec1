package optim

import (
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// SGD configures stochastic gradient descent as PyTorch defines it. With
// g the gradient (times the step's gradient scale) and p the parameter:
//
//	g += WeightDecay·p
//	buf = Momentum·buf + (1-Dampening)·g   (buf = g at the first step)
//	g = Nesterov ? g + Momentum·buf : buf  (with momentum)
//	p -= lr·g
//
// With Momentum 0 SGD keeps no state; otherwise one F32 buffer per
// parameter ("momentum_buffer").
type SGD struct {
	LR          float64 // base learning rate, > 0
	Momentum    float64 // in [0, 1)
	Dampening   float64 // in [0, 1)
	WeightDecay float64 // L2 penalty added to the gradient, >= 0
	Nesterov    bool    // needs Momentum > 0 and Dampening 0
}

func (c SGD) validate() error {
	if err := checkUnit("SGD.Momentum", c.Momentum); err != nil {
		return err
	}
	if err := checkUnit("SGD.Dampening", c.Dampening); err != nil {
		return err
	}
	if c.Nesterov && (c.Momentum == 0 || c.Dampening != 0) {
		return errorf("SGD.Nesterov needs Momentum > 0 and Dampening 0 (have Momentum %v, Dampening %v)", c.Momentum, c.Dampening)
	}
	return nil
}

// NewSGD returns an SGD optimizer for params (one group with cfg's LR and
// WeightDecay; params may be empty) followed by groups.
func NewSGD(params []*tensor.Tensor, cfg SGD, groups ...Group) (*Optimizer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := sgdRule{momentum: cfg.Momentum, dampening: cfg.Dampening, nesterov: cfg.Nesterov}
	return newOptimizer(r, "SGD", params, cfg.LR, cfg.WeightDecay, groups)
}

type sgdRule struct {
	momentum, dampening float64
	nesterov            bool
}

func (sgdRule) name() string { return "sgd" }

func (sgdRule) inPlace(d device.Device) bool { return device.Has(d, device.CapSGDStep) }

func (r sgdRule) buffers() []string {
	if r.momentum == 0 {
		return nil
	}
	return []string{"momentum_buffer"}
}

func (r sgdRule) specs(p *tensor.Tensor) []bufSpec { return elementSpecs(p, r.buffers()) }

func (r sgdRule) update(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs) {
	var buf *tensor.Tensor
	if r.momentum != 0 {
		buf = bufs[0]
	}
	tensor.SGDStep(p, g, buf, device.SGDHyper{
		LR: h.lr, Momentum: r.momentum, Dampening: r.dampening, WeightDecay: h.wd,
		Nesterov: r.nesterov, FirstStep: h.t == 1, GradScale: h.gradScale,
	})
}
