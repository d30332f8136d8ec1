package train

import (
	"slices"

	"github.com/memfit/memfit/optim"
)

// optimizerState is the optimizer's state format, chosen with -optim:
// 8-bit moments (adam8bit, adamw8bit) or a factored second moment
// (adafactor) instead of Adam's two F32 moments. -fit swaps to them only
// when no exact technique fits. The technique also carries the
// optimizer's gradient clipping, which other techniques' rules name.
var optimizerState = &technique{
	name:  "optimizer state",
	group: "optimization",
	doc:   "the optimizer's state in 8-bit moments (2 bytes a parameter instead of 8) or a factored second moment (-optim); approximate, so -fit tries them only when nothing exact fits",
	features: []feature{
		{
			name:        "-optim 8-bit",
			on:          func(c *Config) bool { return c.Optim.Name == "adam8bit" || c.Optim.Name == "adamw8bit" },
			flag:        optimFlag,
			alternative: true,
		},
		{
			name:        "-optim adafactor",
			on:          func(c *Config) bool { return c.Optim.Name == "adafactor" },
			flag:        optimFlag,
			alternative: true,
		},
		{
			name: "-clip",
			on:   func(c *Config) bool { return c.Optim.Clip > 0 },
			flag: func(c *Config) string { return flagOf("clip", c.Optim.Clip) },
		},
	},
	check: func(c *Config) error {
		if !slices.Contains(optim.Names(), c.Optim.Name) {
			return bad("optim", c.Optim.Name, "unknown optimizer (want "+optimizerNames()+")")
		}
		return nil
	},
	describe: func(c *Config) string {
		if c.Generate.Tokens > 0 {
			return ""
		}
		return "optimizer " + c.Optim.Name
	},
	tried: func(c *Config) []string {
		if c.Optim.Name == "sgd" {
			return []string{"-optim"}
		}
		return nil
	},
	fit: &fitAxis{
		// Approximate: after every exact candidate, the same algorithm
		// with 8-bit moments (within 1% of the f32 loss on the GPT
		// reference, BENCHMARKS.md), then Adafactor (within 3%). SGD is
		// never swapped for another algorithm.
		tier: 1,
		options: func(c Config) []Config {
			var names []string
			switch c.Optim.Name {
			case "adam":
				names = []string{"adam", "adam8bit", "adafactor"}
			case "adamw":
				names = []string{"adamw", "adamw8bit", "adafactor"}
			case "adam8bit", "adamw8bit":
				names = []string{c.Optim.Name, "adafactor"}
			default:
				return []Config{c}
			}
			var out []Config
			for _, n := range names {
				d := c
				if n != c.Optim.Name {
					d.Optim.Name = n
					if n == "adafactor" {
						d.Optim.LR = DefaultLRAdafactor
					}
				}
				out = append(out, d)
			}
			return out
		},
	},
}

func optimFlag(c *Config) string { return flagOf("optim", c.Optim.Name) }
