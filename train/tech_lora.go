package train

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"

	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/lora"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// lowRank trains low-rank adapters on Linear layers and freezes
// everything else (package lora): only the adapters have gradients and
// optimizer state, and a checkpoint holds them alone, with the base's
// name and fingerprint.
var lowRank = &technique{
	name:  "LoRA",
	group: "memory",
	doc:   "low-rank adapters on Linear layers; every other parameter frozen (held in 16 bits under -amp), so gradients and optimizer state are the adapters' alone",
	flags: func(f *Flags, c *Config) {
		l := &c.Memory.LoRA
		f.intVar(&l.Rank, "lora", "train low-rank adapters of this `rank` on Linear layers and freeze everything else (0: off); -save then writes the adapters only")
		f.floatVar(&l.Alpha, "lora-alpha", "LoRA scale numerator: the update is scaled by alpha/rank (0: alpha = rank)")
		f.floatVar(&l.Dropout, "lora-dropout", "dropout on the LoRA adapters' input while training")
		f.listVar(&l.Targets, "lora-targets", "comma-separated Linear layer path `patterns` to adapt, e.g. *.attn.*,*.mlp.fc, or PEFT's module names, e.g. q_proj,v_proj (default: every Linear layer)")
		f.stringVar(&l.Init, "init-adapter", "with -init: start from the LoRA adapters in this `dir`, in PEFT's layout (adapter_config.json and adapter_model.safetensors, as -save-peft writes them), to train them further or to -generate with them; the file sets the adapted layers, -lora and -lora-alpha (and -lora-dropout unless given)")
	},
	features: []feature{{
		name: "-lora",
		on:   func(c *Config) bool { return c.Memory.LoRA.Rank > 0 },
		flag: func(c *Config) string { return flagOf("lora", c.Memory.LoRA.Rank) },
	}},
	check: func(c *Config) error {
		l := c.Memory.LoRA
		if l.Init != "" {
			k, _ := c.kind()
			switch {
			case c.Model.Init == "":
				return bad("init-adapter", l.Init, "needs -init (the base model the adapters were trained on)")
			case !hf.HasPEFTLayout(k.HF):
				return bad("init-adapter", l.Init, fmt.Sprintf("PEFT's adapters are read for the decoder families, not -model %s", c.Model.Name))
			case len(l.Targets) > 0:
				return bad("lora-targets", strings.Join(l.Targets, ","), "-init-adapter's file sets the adapted layers (drop -lora-targets)")
			case l.Rank == 0:
				return bad("init-adapter", l.Init, "its rank is not applied (Config.ApplyInit reads adapter_config.json)")
			}
		}
		if l.Rank == 0 {
			switch {
			case l.Alpha != 0:
				return bad("lora-alpha", l.Alpha, "needs -lora (the adapters' rank)")
			case l.Dropout != 0:
				return bad("lora-dropout", l.Dropout, "needs -lora (the adapters' rank)")
			case len(l.Targets) > 0:
				return bad("lora-targets", strings.Join(l.Targets, ","), "needs -lora (the adapters' rank)")
			}
			return nil
		}
		switch {
		case l.Rank < 0:
			return bad("lora", l.Rank, "want a rank of 1 or more (0: no adapters)")
		case !(l.Alpha >= 0) || math.IsInf(l.Alpha, 1):
			return bad("lora-alpha", l.Alpha, "want 0 (the rank: a scale of 1) or more")
		case !(l.Dropout >= 0 && l.Dropout < 1):
			return bad("lora-dropout", l.Dropout, "want a probability in [0, 1)")
		}
		return nil
	},
	describe: func(c *Config) string {
		if c.Memory.LoRA.Rank == 0 {
			return ""
		}
		targets := "every Linear layer"
		switch l := c.Memory.LoRA; {
		case l.Init != "":
			targets = "the layers of " + l.Init
		case len(l.Targets) > 0:
			targets = strings.Join(l.Targets, ",")
		}
		return fmt.Sprintf("LoRA rank %d on %s", c.Memory.LoRA.Rank, targets)
	},
	tried: func(c *Config) []string {
		if c.Memory.LoRA.Rank > 0 {
			return []string{"-freeze"} // the base is frozen
		}
		return nil
	},
	build: func(t *Trainer) (any, error) {
		if t.Config.Memory.LoRA.Rank == 0 {
			return nil, nil
		}
		return &loraPart{}, nil
	},
}

// loraPart holds a run's adapters and what its checkpoints say of the
// base.
type loraPart struct {
	adapted *lora.Adapted
	baseSum string // the base's fingerprint (baseFingerprint), when saving or resuming
}

// shapeModel builds the base in bf16 under -amp bf16: it is frozen and
// held in bf16 (holdFrozenInAutocast), and made so from the start it
// never exists in F32: an import's peak is the bf16 model plus one
// tensor. Not with data parallelism, whose replicas keep the dtype they
// were built in, nor for models built in F32 alone.
func (*loraPart) shapeModel(t *Trainer, b *modelBuild) {
	k, _ := t.Config.kind()
	if t.Config.Precision.AMP == "bf16" && t.Config.Parallel.Engine == "off" && k.Takes(tensor.BF16) {
		b.dtype = tensor.BF16
	}
}

// adaptModel attaches the adapters and freezes the rest. When the run
// saves or resumes, it first fingerprints the base, whose values a LoRA
// checkpoint does not hold.
func (p *loraPart) adaptModel(t *Trainer) error {
	c := t.Config
	if c.Output.Save != "" || c.Output.Resume != "" {
		p.baseSum = baseFingerprint(t.Model.Parameters())
	}
	l := c.Memory.LoRA
	var ad *lora.Adapted
	var err error
	from := ""
	if l.Init != "" {
		ad, err = loadAdapters(t)
		from = " from " + l.Init
	} else {
		lc := lora.Config{Rank: l.Rank, Alpha: l.Alpha, Dropout: l.Dropout, Targets: l.Targets, Seed: c.Seed, DType: c.paramDType()}
		if k, ok := c.kind(); ok && k.HF != "" {
			// Targets may name layers as PEFT does (q_proj, qkv_proj).
			lc.Alias = func(path string) (string, bool) { return hf.PEFTName(k.HF, path+".weight") }
		}
		ad, err = lora.Apply(t.Model, nil, lc)
		if err != nil {
			err = fmt.Errorf("-lora %d: %s", l.Rank, strings.TrimPrefix(err.Error(), "lora: "))
		}
	}
	if err != nil {
		return err
	}
	p.adapted = ad
	t.frozen = ad.Base
	trained := nn.Count(t.Model) - countOf(ad.Base)
	t.logf("LoRA rank %d on %d Linear layers%s: %d of %d parameters train (%.2f%%)",
		l.Rank, len(ad.Layers), from, trained, nn.Count(t.Model), 100*float64(trained)/float64(nn.Count(t.Model)))
	return nil
}

// loadAdapters attaches -init-adapter's adapters with their values
// (hf.LoadPEFT, in the dtype -lora makes them, with the run's dropout:
// the file's unless -lora-dropout was given) and freezes the rest as
// -lora does (lora.Adopt).
func loadAdapters(t *Trainer) (*lora.Adapted, error) {
	c := t.Config
	l := c.Memory.LoRA
	dropout := l.Dropout
	pa, err := hf.LoadPEFT(t.Model, l.Init, hf.PEFTOptions{DType: c.paramDType(), Dropout: &dropout})
	if err != nil {
		return nil, fmt.Errorf("-init-adapter %s: %s", l.Init, strings.TrimPrefix(err.Error(), "hf: "))
	}
	if pa.Rank != l.Rank {
		// The file changed since ApplyInit read it.
		return nil, fmt.Errorf("-init-adapter %s: adapters of rank %d, but its adapter_config.json said %d when the run was configured", l.Init, pa.Rank, l.Rank)
	}
	ad, err := lora.Adopt(t.Model, nil)
	if err != nil {
		return nil, fmt.Errorf("-init-adapter %s: %s", l.Init, strings.TrimPrefix(err.Error(), "lora: "))
	}
	return ad, nil
}

// savedParams: a LoRA checkpoint holds the adapters only (the base is
// -init's, or the seed's).
func (p *loraPart) savedParams(*Trainer) []*tensor.Tensor { return p.adapted.Adapters }

func (p *loraPart) saveState(t *Trainer, st *trainerState, meta map[string]string) {
	st.LoRABase, st.LoRASum = loraBase(t.Config), p.baseSum
	meta["lora_base"], meta["lora_base_crc32c"] = st.LoRABase, st.LoRASum
}

// checkResume refuses adapters for another base or another scale, and a
// whole model into a LoRA run (a plain run refuses adapters:
// checkNotAdapters).
func (p *loraPart) checkResume(t *Trainer, st trainerState) error {
	switch {
	case st.LoRASum == "":
		return fmt.Errorf("it holds a whole model, not LoRA adapters: resume without -lora")
	case st.LoRASum != p.baseSum:
		return fmt.Errorf("its adapters were trained on the base %s (fingerprint %s), but this run's base %s has fingerprint %s (another -init, -seed or -weights?)", st.LoRABase, st.LoRASum, loraBase(t.Config), p.baseSum)
	case st.Config.Memory.LoRA.Alpha != t.Config.Memory.LoRA.Alpha:
		return fmt.Errorf("its adapters were trained with -lora-alpha %v, this run has %v (their scale would change)", st.Config.Memory.LoRA.Alpha, t.Config.Memory.LoRA.Alpha)
	}
	return nil
}

// checkNotAdapters refuses to resume adapters into a run without them.
func checkNotAdapters(st trainerState) error {
	if st.LoRASum != "" {
		return fmt.Errorf("it holds LoRA adapters (rank %d) for the base %s, not a whole model: resume with -lora %d on that base", st.Config.Memory.LoRA.Rank, st.LoRABase, st.Config.Memory.LoRA.Rank)
	}
	return nil
}

// lora is the run's adapters, nil without -lora.
func (t *Trainer) lora() *loraPart {
	p, _ := partAs[*loraPart](t)
	return p
}

func countOf(ps []*tensor.Tensor) int {
	n := 0
	for _, p := range ps {
		n += p.Len()
	}
	return n
}

// baseFingerprint is the CRC-32C of every parameter's name, shape and
// values as built (before a frozen base goes to 16 bits), in 8 hex digits:
// what a LoRA checkpoint records of the base its adapters were trained
// on, so that they are never resumed onto another.
func baseFingerprint(params []*tensor.Tensor) string {
	var c uint32
	for _, p := range params {
		c = crc32.Update(c, castagnoli, []byte(p.Name()))
		for _, d := range p.Shape() {
			c = crc32.Update(c, castagnoli, binary.LittleEndian.AppendUint64(nil, uint64(d)))
		}
		c = updateFloat32s(c, p.Float32s())
	}
	return fmt.Sprintf("%08x", c)
}

// loraBase names the base a LoRA run's adapters apply to: the -init
// checkpoint, or the model built from the seed.
func loraBase(c Config) string {
	if c.Model.Init != "" {
		return c.Model.Init
	}
	return fmt.Sprintf("%s, seed %d", modelKey(c), c.Seed)
}
