package train

import (
	"fmt"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/tensor"
)

// mixedPrecision is autocast (package amp): products take 16-bit inputs
// with F32 accumulation and 16-bit activations are saved; fp16 scales
// the loss dynamically. Frozen parameters are held in the autocast dtype
// (holdFrozenInAutocast).
var mixedPrecision = &technique{
	name:  "mixed precision",
	group: "precision",
	doc:   "products in bf16 or fp16 with f32 accumulation, 16-bit activations saved (about half), frozen weights held in 16 bits; fp16 scales the loss dynamically",
	flags: func(f *Flags, c *Config) {
		f.stringVar(&c.Precision.AMP, "amp", "mixed precision: off, fp16 (with loss scaling) or bf16")
	},
	features: []feature{
		{name: "-amp fp16", on: func(c *Config) bool { return c.Precision.AMP == "fp16" }, flag: ampFlag, alternative: true},
		{name: "-amp bf16", on: func(c *Config) bool { return c.Precision.AMP == "bf16" }, flag: ampFlag, alternative: true},
	},
	check: func(c *Config) error {
		switch c.Precision.AMP {
		case "off", "bf16", "fp16":
			return nil
		}
		return bad("amp", c.Precision.AMP, "unknown mode (want off, fp16 or bf16)")
	},
	describe: func(c *Config) string {
		// Generation runs under -amp too (Trainer.Generate).
		return "amp " + c.Precision.AMP
	},
	tried: func(c *Config) []string {
		if c.Precision.AMP != "off" && c.Precision.AMP != "" {
			return []string{"-amp"}
		}
		return nil
	},
	fit: &fitAxis{
		// bf16 changes the numerics, and on the CPU backend its steps
		// are not much faster than f32's (BENCHMARKS.md): 10%.
		options: func(c Config) []Config {
			out := []Config{c}
			if c.Precision.AMP == "off" {
				c.Precision.AMP = "bf16"
				out = append(out, c)
			}
			return out
		},
		cost: func(c, orig Config) float64 {
			if c.Precision.AMP != orig.Precision.AMP {
				return 1.10
			}
			return 1
		},
		show: []string{"amp"},
	},
	build: func(t *Trainer) (any, error) { return precisionPart{}, nil },
}

func ampFlag(c *Config) string { return flagOf("amp", c.Precision.AMP) }

// precisionPart sets the run's autocast dtype and fp16's loss scaler.
type precisionPart struct{}

func (precisionPart) setPrecision(t *Trainer) error {
	switch t.Config.Precision.AMP {
	case "bf16":
		t.autocast = tensor.BF16
	case "fp16":
		t.autocast = tensor.F16
		var sc amp.ScalerConfig
		if t.distributed() {
			sc.Agree = t.agree
		}
		t.Scaler = amp.NewGradScaler(sc)
	}
	return t.holdFrozenInAutocast()
}

func (precisionPart) scopeOptions(t *Trainer, training bool) []tensor.ScopeOption {
	if t.autocast == device.Invalid {
		return nil
	}
	return []tensor.ScopeOption{tensor.Autocast(t.autocast)}
}

// holdFrozenInAutocast keeps the frozen parameters in the autocast dtype
// when amp is on: a weight that does not train needs no F32 copy, and the
// products would cast it anyway. They go back to the parameters' dtype
// (rounded values, widened exactly) when -unfreeze-at trains them again.
// Not with data parallelism, whose replicas lay the parameters out as
// they were built.
func (t *Trainer) holdFrozenInAutocast() error {
	if t.autocast == device.Invalid || t.distributed() || t.zero3() != nil || t.Config.Precision.Weights == "bf16" {
		return nil
	}
	for _, p := range t.frozen {
		if p.RequiresGrad() || p.DType().IsQuantized() { // -base nf4, int8: stored so already
			continue
		}
		if err := p.ConvertTo(t.heldDType(p)); err != nil {
			return fmt.Errorf("-freeze with -amp: %s: %v", p.Name(), err)
		}
	}
	return nil
}

// trainableAgain gives an unfrozen parameter its training dtype back.
func (t *Trainer) trainableAgain(p *tensor.Tensor) error {
	want := t.paramDType()
	if p.DType() == want {
		return nil
	}
	if err := p.ConvertTo(want); err != nil {
		return fmt.Errorf("unfreezing %s: %v", p.Name(), err)
	}
	return nil
}

// paramDType is the dtype trainable parameters have.
func (t *Trainer) paramDType() tensor.DType {
	if t.Config.Precision.Weights == "bf16" {
		return tensor.BF16
	}
	for _, p := range t.Model.Parameters() {
		if p.RequiresGrad() {
			return p.DType()
		}
	}
	return tensor.F32
}
