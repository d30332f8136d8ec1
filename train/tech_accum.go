package train

import (
	"fmt"
	"math"
)

// accumulation cuts each step into micro-batches (package accumulate):
// only one micro-batch's activations are alive at a time, and the
// losses are weighted so that the gradients are the whole batch's.
var accumulation = &technique{
	name:  "gradient accumulation",
	group: "memory",
	doc:   "each step in -accum micro-batches, one micro-batch's activations alive at a time; the same gradients, smaller products",
	flags: func(f *Flags, c *Config) {
		f.intVar(&c.Memory.Accum, "accum", "micro-batches per optimizer step (gradient accumulation)")
	},
	features: []feature{{
		name: "-accum",
		on:   func(c *Config) bool { return c.Memory.Accum > 1 },
		flag: func(c *Config) string { return flagOf("accum", c.Memory.Accum) },
	}},
	check: func(c *Config) error {
		switch {
		case c.Memory.Accum < 1:
			return bad("accum", c.Memory.Accum, "want at least 1 micro-batch")
		case c.Memory.Accum > c.Optim.Batch:
			return bad("accum", c.Memory.Accum, fmt.Sprintf("more micro-batches than -batch %d examples", c.Optim.Batch))
		}
		return nil
	},
	describe: func(c *Config) string {
		if c.Generate.Tokens > 0 {
			return ""
		}
		return fmt.Sprintf("batch %d in %d micro-batch(es)", c.Optim.Batch, c.Memory.Accum)
	},
	fit: &fitAxis{
		// Doubling the micro-batches costs about 5% a step.
		options: func(c Config) []Config {
			var out []Config
			for a := c.Memory.Accum; a <= c.Optim.Batch; a *= 2 {
				d := c
				d.Memory.Accum = a
				out = append(out, d)
			}
			return out
		},
		cost: func(c, orig Config) float64 {
			return 1 + 0.05*math.Log2(float64(c.Memory.Accum)/float64(orig.Memory.Accum))
		},
		keepsState: func(c *Config) { c.Memory.Accum = 1 }, // micro-batches change no parameter or state byte
		show:       []string{"accum"},
	},
}
