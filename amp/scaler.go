package amp

import (
	"errors"
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// Optimizer is what the scaler steps: it lists the parameters whose
// gradients it will apply and applies them.
type Optimizer interface {
	Params() []*tensor.Tensor
	Step() error
}

// ScalerConfig holds the scaler's constants; zero fields take PyTorch's
// defaults.
type ScalerConfig struct {
	InitScale      float64 // 2^16
	GrowthFactor   float64 // 2
	BackoffFactor  float64 // 0.5
	GrowthInterval int     // 2000 clean steps
	MinScale       float64 // 1: the scale never falls below it
	// Agree, if set, combines this process's overflow finding with the
	// other data-parallel ranks' (an all-reduce of the flag with max):
	// when each rank unscales only its shard of the gradients (ZeRO), one
	// rank's inf must make every rank skip the step and back off, or the
	// replicas and their scales drift apart. Unscale calls it once.
	Agree func(foundInf bool) (bool, error)
}

// GradScaler implements dynamic loss scaling for F16 training. A step is:
//
//	loss := scaler.Scale(s, loss); loss.Backward()
//	scaler.Unscale(opt)            // optional: before clipping
//	clip(...)
//	stepped, err := scaler.Step(opt)
//	scaler.Update()
//
// With gradient accumulation, Scale every micro-batch loss and call
// Unscale/Step/Update once, at the window boundary.
type GradScaler struct {
	cfg      ScalerConfig
	scale    float64
	good     int  // consecutive steps without inf/NaN
	unscaled bool // Unscale ran this step
	foundInf bool
	skipped  int // steps skipped so far
}

// NewGradScaler returns a scaler with cfg (zero fields take defaults).
func NewGradScaler(cfg ScalerConfig) *GradScaler {
	if cfg.InitScale == 0 {
		cfg.InitScale = 1 << 16
	}
	if cfg.GrowthFactor == 0 {
		cfg.GrowthFactor = 2
	}
	if cfg.BackoffFactor == 0 {
		cfg.BackoffFactor = 0.5
	}
	if cfg.GrowthInterval == 0 {
		cfg.GrowthInterval = 2000
	}
	if cfg.MinScale == 0 {
		cfg.MinScale = 1
	}
	return &GradScaler{cfg: cfg, scale: cfg.InitScale}
}

// NewGradScalerFor returns a scaler for autocast dtype d: F16 needs one;
// BF16 (F32's exponent range) and F32 do not, which is an error here so a
// configuration cannot pay for scaling it does not need.
func NewGradScalerFor(d device.DType, cfg ScalerConfig) (*GradScaler, error) {
	if d != device.F16 {
		return nil, fmt.Errorf("amp: %v needs no loss scaling (only f16 does); use no GradScaler", d)
	}
	return NewGradScaler(cfg), nil
}

// Scale returns loss multiplied by the current scale.
func (g *GradScaler) Scale(s *tensor.Scope, loss *tensor.Tensor) *tensor.Tensor {
	return s.MulScalar(loss, g.scale)
}

// Agree returns the configuration's Agree function (nil if none).
func (g *GradScaler) Agree() func(bool) (bool, error) { return g.cfg.Agree }

// LossScale is the current scale.
func (g *GradScaler) LossScale() float64 { return g.scale }

// Skipped is the number of steps skipped for inf/NaN gradients so far.
func (g *GradScaler) Skipped() int { return g.skipped }

// ErrUnscaledTwice is returned by a second Unscale in one step.
var ErrUnscaledTwice = errors.New("amp: Unscale called twice in one step (call Update after each Step)")

// Unscale divides every gradient of opt's parameters by the scale, in
// place, and records whether any is inf or NaN. Call it at most once per
// step, before clipping; Step calls it when it has not run.
func (g *GradScaler) Unscale(opt Optimizer) error {
	if g.unscaled {
		return ErrUnscaledTwice
	}
	inv := 1 / g.scale
	err := tensor.Step(func(s *tensor.Scope) error {
		for _, p := range opt.Params() {
			gr := p.Grad()
			if gr == nil {
				continue
			}
			if gr.DType() == device.F16 {
				return fmt.Errorf("amp: gradient of %s is f16: master weights and their gradients must be f32", p.Name())
			}
			if !gr.AllFinite() {
				g.foundInf = true
			}
			s.MulScalarInPlace(gr, inv)
		}
		return nil
	}, tensor.NoGrad())
	if err != nil {
		return err
	}
	if g.cfg.Agree != nil {
		found, err := g.cfg.Agree(g.foundInf)
		if err != nil {
			return fmt.Errorf("amp: agreeing on overflow across ranks: %w", err)
		}
		g.foundInf = found
	}
	g.unscaled = true
	return nil
}

// Step unscales (if not done yet) and steps opt unless a gradient is inf
// or NaN, in which case parameters and optimizer state are left untouched
// and stepped is false.
func (g *GradScaler) Step(opt Optimizer) (stepped bool, err error) {
	if !g.unscaled {
		if err := g.Unscale(opt); err != nil {
			return false, err
		}
	}
	if g.foundInf {
		g.skipped++
		return false, nil
	}
	return true, opt.Step()
}

// Update adapts the scale after a step: back off after an overflow, grow
// after GrowthInterval clean steps in a row.
func (g *GradScaler) Update() {
	if g.foundInf {
		g.scale = math.Max(g.scale*g.cfg.BackoffFactor, g.cfg.MinScale)
		g.good = 0
	} else if g.unscaled {
		g.good++
		if g.good >= g.cfg.GrowthInterval {
			g.scale *= g.cfg.GrowthFactor
			g.good = 0
		}
	}
	g.unscaled, g.foundInf = false, false
}

// ScalerState is what checkpoints save of a scaler.
type ScalerState struct {
	Scale     float64 `json:"scale"`
	GoodSteps int     `json:"good_steps"`
	Skipped   int     `json:"skipped"`
}

// State exports the scaler's state.
func (g *GradScaler) State() ScalerState {
	return ScalerState{Scale: g.scale, GoodSteps: g.good, Skipped: g.skipped}
}

// SetState restores a state from State.
func (g *GradScaler) SetState(st ScalerState) error {
	if !(st.Scale > 0) || math.IsInf(st.Scale, 0) || st.GoodSteps < 0 {
		return fmt.Errorf("amp: invalid scaler state %+v", st)
	}
	g.scale, g.good, g.skipped = st.Scale, st.GoodSteps, st.Skipped
	return nil
}
