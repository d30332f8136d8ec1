package train

// packing concatenates fine-tuning examples into windows of -context
// positions without padding (package data, SFTOptions.Pack): each token
// carries its position within its example, attention never crosses an
// example (the models' Packed interface: the fused attention kernels
// skip other examples' keys), and positions restart per example. Without
// it, a batch is padded to its longest example.
var packing = &technique{
	name:  "packing",
	group: "data",
	doc:   "fine-tuning examples packed into -context windows without padding, attention kept inside each example and positions restarting: no padding's activations or compute; the same loss",
	flags: func(f *Flags, c *Config) {
		f.boolVar(&c.Data.Pack, "pack", "with fine-tuning records: pack examples into -context windows without padding (attention never crosses an example; positions restart per example)")
	},
	features: []feature{{
		name: "-pack",
		on:   func(c *Config) bool { return c.Data.Pack },
		flag: func(c *Config) string { return "-pack" },
	}},
	check: func(c *Config) error {
		if k, ok := c.kind(); ok && c.Data.Pack && !k.Tokens {
			return bad("pack", true, "packs token sequences: -model "+c.Model.Name+" takes none")
		}
		return nil
	},
	describe: func(c *Config) string {
		if c.Data.Pack {
			return "packed"
		}
		return ""
	},
}
