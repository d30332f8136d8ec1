package train

import (
	"fmt"
	"strings"

	"github.com/memfit/memfit/freeze"
	"github.com/memfit/memfit/tensor"
)

// freezing stops parameters that match -freeze's patterns from training
// (package freeze): no gradient, no optimizer state, and backward stops
// below them; -unfreeze-at trains them again from a step on.
var freezing = &technique{
	name:  "layer freezing",
	group: "memory",
	doc:   "parameters matching -freeze get no gradient, no optimizer state, and backward stops below them (held in 16 bits under -amp); -unfreeze-at trains them again",
	flags: func(f *Flags, c *Config) {
		f.listVar(&c.Memory.Freeze, "freeze", "comma-separated parameter path `patterns` to freeze, e.g. embed.*,blocks.[0-2].*")
		f.intVar(&c.Memory.UnfreezeAt, "unfreeze-at", "step at which frozen parameters start training (0: never)")
	},
	features: []feature{
		{
			name: "-freeze",
			on:   func(c *Config) bool { return len(c.Memory.Freeze) > 0 },
			flag: func(c *Config) string { return flagOf("freeze", strings.Join(c.Memory.Freeze, ",")) },
		},
		{
			name: "-unfreeze-at",
			on:   func(c *Config) bool { return c.Memory.UnfreezeAt > 0 },
			flag: func(c *Config) string { return flagOf("unfreeze-at", c.Memory.UnfreezeAt) },
		},
	},
	needs: []rule{
		{"-unfreeze-at", "-freeze", "nothing is frozen (set -freeze)"},
	},
	refuses: []rule{
		{"-freeze", "-lora", "-lora freezes every parameter but the adapters"},
		{"-unfreeze-at", "-lora", "-lora's base stays frozen"},
	},
	check: func(c *Config) error {
		if c.Memory.UnfreezeAt < 0 {
			return bad("unfreeze-at", c.Memory.UnfreezeAt, "want 0 (never) or a step")
		}
		return nil
	},
	describe: func(c *Config) string {
		if len(c.Memory.Freeze) == 0 {
			return ""
		}
		return "frozen " + strings.Join(c.Memory.Freeze, ",")
	},
	tried: func(c *Config) []string {
		if len(c.Memory.Freeze) > 0 {
			return []string{"-freeze"}
		}
		return nil
	},
	build: func(t *Trainer) (any, error) {
		if len(t.Config.Memory.Freeze) == 0 {
			return nil, nil
		}
		return freezePart{}, nil
	},
}

// freezePart freezes the matching parameters once the optimizer exists,
// and trains them again at -unfreeze-at.
type freezePart struct{}

func (freezePart) freezeModel(t *Trainer) error {
	ps, err := freeze.Apply(t.Model, t.Opt, t.Config.Memory.Freeze...)
	if err != nil {
		return fmt.Errorf("-freeze: %v", err)
	}
	t.frozen = ps
	return nil
}

// beforeStep makes the frozen parameters trainable at UnfreezeAt.
func (freezePart) beforeStep(t *Trainer) error {
	if t.Config.Memory.UnfreezeAt == 0 || t.step+1 != t.Config.Memory.UnfreezeAt || len(t.frozen) == 0 {
		return nil
	}
	var newly []*tensor.Tensor
	for _, p := range t.frozen {
		if !p.RequiresGrad() {
			if err := t.trainableAgain(p); err != nil {
				return err
			}
			p.SetRequiresGrad(true)
			newly = append(newly, p)
		}
	}
	t.logf("step %d: unfreezing %d parameters", t.step+1, len(newly))
	return t.Opt.AddParams(t.Config.Optim.LR, newly...)
}

// unfrozenAt reports whether a checkpoint of step was saved after the
// frozen parameters were trained again.
func (t *Trainer) unfrozenAt(step int) bool {
	return t.Config.Memory.UnfreezeAt > 0 && step >= t.Config.Memory.UnfreezeAt
}

// beforeLoad gives parameters unfrozen before the save their training
// dtype back (they were held in the autocast dtype while frozen).
func (freezePart) beforeLoad(t *Trainer, st trainerState) error {
	if !t.unfrozenAt(st.Step) {
		return nil
	}
	for _, p := range t.frozen {
		if err := t.trainableAgain(p); err != nil {
			return err
		}
	}
	return nil
}

// afterLoad trains the parameters unfrozen before the save again.
func (freezePart) afterLoad(t *Trainer, st trainerState) error {
	if t.unfrozenAt(st.Step) {
		for _, p := range t.frozen {
			p.SetRequiresGrad(true)
		}
	}
	return nil
}
