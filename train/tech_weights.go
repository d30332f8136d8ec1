package train

import (
	"fmt"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// bf16Weights stores the parameters in bf16 with no F32 master copy: the
// optimizer computes each update in F32 and rounds it back
// stochastically (optim.Optimizer.SetStochasticRounding), seeded, so the
// rounding is unbiased and a resumed run draws the same bits.
var bf16Weights = &technique{
	name:  "bf16 weights",
	group: "precision",
	doc:   "parameters (and gradients) in bf16 with no f32 master copy, updates rounded stochastically: 2 bytes a parameter instead of 4; approximate, so -fit tries it after the optimizer's state formats",
	flags: func(f *Flags, c *Config) {
		f.stringVar(&c.Precision.Weights, "weights", "parameter dtype: f32, or bf16 (no f32 master copy; updates rounded stochastically)")
	},
	features: []feature{{
		name: "-weights bf16",
		on:   func(c *Config) bool { return c.Precision.Weights == "bf16" },
		flag: func(c *Config) string { return flagOf("weights", c.Precision.Weights) },
	}},
	refuses: []rule{
		{"-weights bf16", "-zero 3", "ZeRO-3's flat parameter storage is f32 (-zero 1 and 2 shard bf16 parameters)"},
	},
	check: func(c *Config) error {
		switch c.Precision.Weights {
		case "", "f32":
			return nil
		case "bf16":
			if k, ok := c.kind(); ok && !k.Takes(tensor.BF16) {
				var takes []string
				for _, n := range models.Names() {
					if k, _ := models.KindOf(n); k.Takes(tensor.BF16) {
						takes = append(takes, n)
					}
				}
				return bad("weights", c.Precision.Weights, fmt.Sprintf("-model %s keeps f32 parameters (%s take bf16)", c.Model.Name, strings.Join(takes, ", ")))
			}
			return nil
		}
		return bad("weights", c.Precision.Weights, "unknown dtype (want f32 or bf16)")
	},
	describe: func(c *Config) string {
		if c.Precision.Weights == "bf16" {
			return "bf16 weights"
		}
		return ""
	},
	fit: &fitAxis{
		tier: 2,
		options: func(c Config) []Config {
			out := []Config{c}
			if c.Precision.Weights == "" || c.Precision.Weights == "f32" {
				c.Precision.Weights = "bf16"
				out = append(out, c)
			}
			return out
		},
	},
	build: func(t *Trainer) (any, error) {
		if t.Config.Precision.Weights != "bf16" {
			return nil, nil
		}
		return bf16Part{}, nil
	},
}

type bf16Part struct{}

func (bf16Part) shapeModel(_ *Trainer, b *modelBuild) { b.dtype = tensor.BF16 }

// tuneOptimizer rounds every update stochastically, seeded from the run's
// seed: deterministic, and a resumed run draws what the uninterrupted one
// would (the bits depend on each parameter's update count, which the
// checkpoint keeps).
func (bf16Part) tuneOptimizer(t *Trainer, o *optim.Optimizer) {
	o.SetStochasticRounding(t.Config.Seed ^ 0x5eed_b16)
}

// noteWeightDType logs a resume across -weights dtypes: widening is
// exact, narrowing rounds each weight once.
func noteWeightDType(t *Trainer, st trainerState) {
	from, to := weightDType(st.Config.Precision.Weights), weightDType(t.Config.Precision.Weights)
	if from == to {
		return
	}
	how := "exactly"
	if to == "bf16" {
		how = "rounded to nearest"
	}
	t.logf("resume %s: weights saved from a -weights %s run continue as -weights %s (%s)", t.Config.Output.Resume, from, to, how)
}

// weightDType is -weights with its default spelled out.
func weightDType(w string) string {
	if w == "" {
		return "f32"
	}
	return w
}

// paramDType is the dtype -weights gives the parameters (Invalid: the
// model's default, F32).
func (c Config) paramDType() tensor.DType {
	if c.Precision.Weights == "bf16" {
		return tensor.BF16
	}
	return device.Invalid
}
