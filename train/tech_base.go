package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/freeze"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// quantizedBase chooses the storage of the frozen Linear weights (a LoRA
// base, the layers -freeze froze): nf4 or int8, quantized as the model is
// built or imported (one tensor at a time: the model never exists whole
// in a float dtype) and dequantized inside each product; or bf16 or f32.
// Embeddings and norms stay in the autocast dtype (an embedding is a
// gather, which no quantized kernel does), and so does the LM head unless
// -base ends in +head (then it needs -lm-head full: the chunked head
// reads its weight unquantized).
var quantizedBase = &technique{
	name:  "frozen base storage",
	group: "precision",
	doc:   "the frozen Linear weights (a -lora base, -freeze's layers) stored in nf4 (4.13 bits a weight) or int8 (8.5 bits), quantized tensor by tensor as the model is built or imported and dequantized inside each product (the backward gives the input its gradient only); embeddings and the LM head stay 16-bit; approximate (the base's values change), so -fit tries it with the optimizer's state formats, nf4 first",
	flags: func(f *Flags, c *Config) {
		f.stringVar(&c.Precision.Base, "base", "storage of the frozen Linear weights (-lora's base, -freeze's layers): nf4 or int8 (quantized, dequantized inside each product; nf4+head or int8+head quantize an untied LM head too, with -lm-head full), bf16 or f32 (default: the -amp dtype)")
	},
	features: []feature{
		{name: "-base nf4", on: func(c *Config) bool { return c.baseQuant() == tensor.NF4 }, flag: baseFlag, alternative: true},
		{name: "-base int8", on: func(c *Config) bool { return c.baseQuant() == tensor.Int8 }, flag: baseFlag, alternative: true},
		{name: "-base bf16", on: func(c *Config) bool { return c.Precision.Base == "bf16" }, flag: baseFlag, alternative: true},
		{name: "-base f32", on: func(c *Config) bool { return c.Precision.Base == "f32" }, flag: baseFlag, alternative: true},
		{name: "-base +head", on: func(c *Config) bool { _, head := c.baseStorage(); return head }, flag: baseFlag},
	},
	refuses: []rule{
		{"-base nf4", "-zero 3", "ZeRO-3 flattens every parameter into one f32 or bf16 storage, which a quantized weight is not (use -zero 1 or 2)"},
		{"-base int8", "-zero 3", "ZeRO-3 flattens every parameter into one f32 or bf16 storage, which a quantized weight is not (use -zero 1 or 2)"},
		{"-base nf4", "-unfreeze-at", "a quantized weight cannot train again: it holds 4-bit codes, not values an update could change (use -base bf16)"},
		{"-base int8", "-unfreeze-at", "a quantized weight cannot train again: it holds 8-bit codes, not values an update could change (use -base bf16)"},
		{"-base f32", "-weights bf16", "the parameters are built in bf16: an f32 copy of the frozen ones would hold nothing more"},
		{"-base +head", "-lm-head chunked", "the chunked head reads its weight unquantized (tensor.LinearCrossEntropy): use -lm-head full"},
	},
	needs: []rule{
		{"-base bf16", "-amp bf16", "the products take the weight in their input's dtype: without autocast that is f32, and under fp16 each product would cast the weight again"},
	},
	check: func(c *Config) error {
		v := c.Precision.Base
		s, head := c.baseStorage()
		switch s {
		case "":
			if head {
				return bad("base", v, "+head follows nf4 or int8")
			}
			return nil
		case "nf4", "int8":
		case "bf16", "f32":
			if head {
				return bad("base", v, "+head goes with nf4 or int8 (without them the LM head is held in the -amp dtype already)")
			}
		default:
			return bad("base", v, "unknown storage (want nf4, int8, bf16 or f32; nf4+head or int8+head to quantize an untied LM head too)")
		}
		k, _ := c.kind()
		switch {
		case c.Memory.LoRA.Rank == 0 && len(c.Memory.Freeze) == 0:
			return bad("base", v, "nothing is frozen: it stores -lora's base or the layers -freeze freezes")
		case c.baseQuant() != device.Invalid && featureNamed("-dist").on(c) && c.Parallel.Zero == 0:
			return bad("base", v, "-dist without -zero: DDP broadcasts every parameter in f32 buckets, which a quantized weight is not (use -zero 1 or 2, which take the trainable parameters only)")
		case head && !k.Tokens:
			return bad("base", v, fmt.Sprintf("-model %s has no LM head", c.Model.Name))
		}
		return nil
	},
	describe: func(c *Config) string {
		s, head := c.baseStorage()
		if s == "" {
			return ""
		}
		if head {
			return "frozen Linear weights and LM head in " + s
		}
		return "frozen Linear weights in " + s
	},
	tried: func(c *Config) []string {
		if c.baseQuant() != device.Invalid {
			return []string{"-base"}
		}
		return nil
	},
	fit: &fitAxis{
		// Approximate (the frozen weights' values change), and beside
		// the optimizer's state formats: tier 1, after them in technique
		// order, so they vary faster. nf4 first: QLoRA's format, the
		// smaller by half.
		tier: 1,
		options: func(c Config) []Config {
			out := []Config{c}
			if c.Precision.Base == "" && (c.Memory.LoRA.Rank > 0 || len(c.Memory.Freeze) > 0) {
				for _, s := range []string{"nf4", "int8"} {
					q := c
					q.Precision.Base = s
					out = append(out, q)
				}
			}
			return out
		},
	},
	build: func(t *Trainer) (any, error) {
		if t.Config.Precision.Base == "" {
			return nil, nil
		}
		p := &basePart{quant: t.Config.baseQuant()}
		if p.quant != device.Invalid && len(t.Config.Memory.Freeze) > 0 {
			return quantFreezePart{p}, nil
		}
		return p, nil
	},
}

func baseFlag(c *Config) string { return flagOf("base", c.Precision.Base) }

// lmHeadWeight is the weight of a token model's untied LM head (Llama's;
// a GPT's head is its token embedding).
const lmHeadWeight = "head.weight"

// baseStorage splits -base into its storage and whether "+head" asks for
// the LM head too.
func (c Config) baseStorage() (storage string, head bool) {
	return strings.CutSuffix(c.Precision.Base, "+head")
}

// baseQuant is the quantized dtype of -base (device.Invalid: none).
func (c Config) baseQuant() tensor.DType {
	switch s, _ := c.baseStorage(); s {
	case "nf4":
		return tensor.NF4
	case "int8":
		return tensor.Int8
	}
	return device.Invalid
}

// baseQuantizer says, for the weight of a Linear layer (by name), the
// dtype -base quantizes it to as the model is built or imported
// (device.Invalid: none): every Linear weight of a -lora base, which
// freezes all of them, or those -freeze's patterns match; never an LM
// head without +head. nil when -base does not quantize.
func (c Config) baseQuantizer() func(name string) tensor.DType {
	q := c.baseQuant()
	if q == device.Invalid {
		return nil
	}
	_, head := c.baseStorage()
	lora, patterns := c.Memory.LoRA.Rank > 0, c.Memory.Freeze
	return func(name string) tensor.DType {
		switch {
		case name == lmHeadWeight && !head:
			return device.Invalid
		case lora || frozenBy(name, patterns):
			return q
		}
		return device.Invalid
	}
}

// frozenBy reports whether one of -freeze's patterns matches the
// parameter name (as freeze.Apply matches it).
func frozenBy(name string, patterns []string) bool {
	for _, p := range patterns {
		if m, err := freeze.Select("parameter", []string{name}, p); err == nil && len(m) > 0 {
			return true
		}
	}
	return false
}

// materializeBase gives m's deferred parameters their memory one at a
// time, in order, and quantizes each Linear weight quant names a dtype
// for as soon as it exists, frozen: the peak is the model so far plus one
// weight in both forms, never the whole model in a float dtype. A model
// built without deferral (the mlp, the cnn) has its weights quantized in
// turn all the same. park, when set, takes each quantized weight of a
// block as soon as it is made (-offload base: to the host).
func materializeBase(m nn.Module, quant func(string) tensor.DType, park func(*tensor.Tensor) error) error {
	linear := nn.LinearWeights(m)
	blocks := nn.BlockParameters(m)
	for _, p := range m.Parameters() {
		if p.IsDeferred() {
			if err := p.Materialize(); err != nil {
				return err
			}
		}
		q := device.Invalid
		if linear[p] {
			q = quant(p.Name())
		}
		if q == device.Invalid || p.DType() == q {
			continue
		}
		p.SetRequiresGrad(false)
		if err := p.ConvertTo(q); err != nil {
			return fmt.Errorf("%s: %v", p.Name(), err)
		}
		if park != nil && blocks[p] {
			if err := park(p); err != nil {
				return fmt.Errorf("%s: %v", p.Name(), err)
			}
		}
	}
	return nil
}

// basePart is -base's part of a run: it knows the model's Linear weights
// (for the dtype the frozen ones are held in) and builds the optimizer
// over the float parameters when some are quantized.
type basePart struct {
	quant  tensor.DType // device.Invalid: -base bf16 or f32
	linear map[*tensor.Tensor]bool
}

// shapeModel keeps -base f32's weights in f32: -lora builds its base in
// bf16 under -amp bf16.
func (p *basePart) shapeModel(t *Trainer, b *modelBuild) {
	if t.Config.Precision.Base == "f32" && b.dtype == tensor.BF16 && t.Config.Precision.Weights != "bf16" {
		b.dtype = device.Invalid
	}
}

// adaptModel notes the model's Linear weights and says what -base
// quantized (built or imported so: buildModel).
func (p *basePart) adaptModel(t *Trainer) error {
	p.linear = nn.LinearWeights(t.Model)
	if p.quant == device.Invalid {
		return nil
	}
	var n int
	var bytes, b16 int64
	head := false
	for _, w := range t.Model.Parameters() {
		if w.DType().IsQuantized() {
			n++
			bytes += w.Bytes()
			b16 += 2 * int64(w.Len())
			head = head || w.Name() == lmHeadWeight
		}
	}
	v := t.Config.Precision.Base
	if _, want := t.Config.baseStorage(); want && !head {
		return fmt.Errorf("-base %s: the model has no untied LM head (%s): a tied head is the token embedding, a gather, which stays in 16 bits", v, lmHeadWeight)
	}
	if n == 0 {
		t.logf("train: warning: -base %s: no frozen Linear weight to quantize (-freeze %s freezes none)", v, strings.Join(t.Config.Memory.Freeze, ","))
		return nil
	}
	t.logf("-base %s: %d frozen Linear weights in %s (%s; %s in bf16)", v, n, p.quant, memory.FormatBytes(bytes), memory.FormatBytes(b16))
	return nil
}

// buildOptimizer builds the optimizer over the float parameters: a
// quantized weight never trains, and optim holds float tensors only.
// Offloading the optimizer builds its own, over the trainable ones.
func (p *basePart) buildOptimizer(t *Trainer) (bool, error) {
	if p.quant == device.Invalid || t.Config.OffloadsOptimizer() {
		return false, nil
	}
	var params []*tensor.Tensor
	for _, w := range t.Model.Parameters() {
		if !w.DType().IsQuantized() {
			params = append(params, w)
		}
	}
	o, err := t.newOptimizer(params)
	if err != nil {
		return false, err
	}
	t.Opt = o
	return true, nil
}

// quantFreezePart is -base nf4 or int8 with -freeze: its checkpoints hold
// every parameter but the quantized weights, which a resumed run builds
// again from -init or the seed as this one did (a LoRA checkpoint holds
// the adapters alone anyway).
type quantFreezePart struct{ *basePart }

func (quantFreezePart) savedParams(t *Trainer) []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, p := range t.Model.Parameters() {
		if !p.DType().IsQuantized() {
			out = append(out, p)
		}
	}
	return out
}

func (quantFreezePart) saveState(t *Trainer, _ *trainerState, meta map[string]string) {
	meta["base"] = t.Config.Precision.Base
}

// checkResume refuses a checkpoint whose frozen weights this run would not
// rebuild as they were: another -base, -init, seed or -freeze.
func (quantFreezePart) checkResume(t *Trainer, st trainerState) error {
	if err := checkNotAdapters(st); err != nil {
		return err
	}
	a, b := st.Config, t.Config
	const why = "the checkpoint does not hold the quantized frozen weights, which the run builds again"
	switch {
	case a.Precision.Base != b.Precision.Base:
		return fmt.Errorf("it was saved by a run with -base %s, this run has -base %s (%s)", quoteShort(a.Precision.Base), quoteShort(b.Precision.Base), why)
	case a.Model.Init != b.Model.Init:
		return fmt.Errorf("it was trained from -init %s, this run has -init %s (%s from it)", quoteShort(a.Model.Init), quoteShort(b.Model.Init), why)
	case a.Model.Init == "" && a.Seed != b.Seed:
		return fmt.Errorf("its frozen weights were drawn with -seed %d, this run has -seed %d (%s from the seed)", a.Seed, b.Seed, why)
	case !slices.Equal(a.Memory.Freeze, b.Memory.Freeze):
		return fmt.Errorf("it was saved with -freeze %s, this run has -freeze %s (%s)", strings.Join(a.Memory.Freeze, ","), strings.Join(b.Memory.Freeze, ","), why)
	}
	return nil
}

// base is the run's -base part, nil without -base.
func (t *Trainer) base() *basePart {
	for _, p := range t.parts {
		switch p := p.(type) {
		case *basePart:
			return p
		case quantFreezePart:
			return p.basePart
		}
	}
	return nil
}

// heldDType is the dtype holdFrozenInAutocast holds a frozen parameter
// in: -base's for a Linear weight (bf16; f32: as built), the autocast
// dtype otherwise. A quantized weight stays as it is.
func (t *Trainer) heldDType(p *tensor.Tensor) tensor.DType {
	if bp := t.base(); bp != nil && bp.linear[p] {
		switch t.Config.Precision.Base {
		case "bf16":
			return tensor.BF16
		case "f32":
			return p.DType()
		}
	}
	return t.autocast
}
