package train

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/techniques.md")

// TestTechniquesDocIsCurrent: docs/techniques.md is what WriteTechniques
// writes from today's declarations.
func TestTechniquesDocIsCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTechniques(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "docs", "techniques.md")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Errorf("%s is stale: run go test ./train/ -run TestTechniquesDocIsCurrent -update", path)
	}
}

// TestTechniqueDeclarations: every rule names features that exist, every
// feature name is unique, every technique's flags are in a help group,
// and Validate enforces each refusal and need it declares.
func TestTechniqueDeclarations(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range features() {
		if seen[f.name] {
			t.Errorf("feature %s declared twice", f.name)
		}
		seen[f.name] = true
	}
	for _, tech := range techniques {
		for _, r := range append(append([]rule{}, tech.refuses...), tech.needs...) {
			if !seen[r.feature] || !seen[r.other] {
				t.Errorf("%s: rule %s/%s names an unknown feature", tech.name, r.feature, r.other)
			}
			if !containsFeature(tech, r.feature) {
				t.Errorf("%s declares a rule for %s, a feature of another technique", tech.name, r.feature)
			}
		}
		if tech.name == "" || tech.doc == "" {
			t.Errorf("technique %q has no name or doc", tech.name)
		}
	}
	NewFlags("train", new(Config)) // panics on a flag in an unknown group
}

func containsFeature(t *technique, name string) bool {
	for _, f := range t.features {
		if f.name == name {
			return true
		}
	}
	return false
}

// TestRulesAreEnforced: for each declared refusal a configuration that
// turns on both features is refused by Validate with an error naming
// both, and for each need one that turns on the first without the second.
func TestRulesAreEnforced(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Config)
		want []string
	}{
		{"sib accum", func(c *Config) { c.Memory.StepInBackward, c.Memory.Accum = true, 2 }, []string{"-step-in-backward", "-accum 2"}},
		{"sib fp16", func(c *Config) { c.Memory.StepInBackward, c.Precision.AMP = true, "fp16" }, []string{"-step-in-backward", "-amp fp16"}},
		{"sib clip", func(c *Config) { c.Memory.StepInBackward, c.Optim.Clip = true, 1 }, []string{"-step-in-backward", "-clip 1"}},
		{"sib dist", func(c *Config) { c.Memory.StepInBackward, c.Parallel.Engine = true, "mpi" }, []string{"-step-in-backward", "-dist mpi"}},
		{"bf16 weights zero 3", func(c *Config) { c.Precision.Weights, c.Parallel.Engine, c.Parallel.Zero = "bf16", "mpi", 3 }, []string{"-weights bf16", "-zero 3"}},
		{"freeze lora", func(c *Config) { c.Memory.Freeze, c.Memory.LoRA.Rank = []string{"layers.0.*"}, 4 }, []string{"-freeze layers.0.*", "-lora 4"}},
		{"unfreeze lora", func(c *Config) { c.Memory.UnfreezeAt, c.Memory.Freeze, c.Memory.LoRA.Rank = 3, nil, 4 }, []string{"-unfreeze-at 3"}},
		{"unfreeze without freeze", func(c *Config) { c.Memory.UnfreezeAt = 3 }, []string{"-unfreeze-at 3", "needs -freeze"}},
		{"offload optimizer sib", func(c *Config) { c.Memory.Offload.Mode, c.Memory.StepInBackward = "optimizer", true }, []string{"-offload optimizer", "-step-in-backward"}},
		{"offload optimizer dist", func(c *Config) { c.Memory.Offload.Mode, c.Parallel.Engine = "all", "mpi" }, []string{"-offload all", "-dist mpi"}},
		{"offload optimizer freeze", func(c *Config) { c.Memory.Offload.Mode, c.Memory.Freeze = "optimizer", []string{"layers.0.*"} }, []string{"-offload optimizer", "-freeze"}},
		{"offload optimizer bf16", func(c *Config) { c.Memory.Offload.Mode, c.Precision.Weights = "optimizer", "bf16" }, []string{"-offload optimizer", "-weights bf16"}},
		{"offload prefetch alone", func(c *Config) { c.Memory.Offload.Prefetch = 2 }, []string{"-offload-prefetch 2", "needs -offload activations"}},
		{"zero without dist", func(c *Config) { c.Parallel.Zero = 1 }, []string{"-zero 1", "needs -dist"}},
		{"zero prefetch without 3", func(c *Config) { c.Parallel.Engine, c.Parallel.Zero, c.Parallel.ZeroPrefetch = "mpi", 2, true }, []string{"-zero-prefetch", "needs -zero 3"}},
		{"ranks without dist", func(c *Config) { c.Parallel.Ranks = 2 }, []string{"-ranks 2", "needs -dist"}},
		{"zero unfreeze", func(c *Config) {
			c.Parallel.Engine, c.Parallel.Zero, c.Memory.Freeze, c.Memory.UnfreezeAt = "mpi", 1, []string{"layers.0.*"}, 3
		}, []string{"-zero 1", "-unfreeze-at 3"}},
		{"zero 3 adafactor", func(c *Config) { c.Parallel.Engine, c.Parallel.Zero, c.Optim.Name = "mpi", 3, "adafactor" }, []string{"-zero 3", "-optim adafactor", "use -zero 1 or 2"}},
		{"base nf4 zero 3", func(c *Config) {
			c.Precision.Base, c.Memory.LoRA.Rank, c.Parallel.Engine, c.Parallel.Zero = "nf4", 4, "mpi", 3
		}, []string{"-base nf4", "-zero 3", "flattens"}},
		{"base int8 zero 3", func(c *Config) {
			c.Precision.Base, c.Memory.LoRA.Rank, c.Parallel.Engine, c.Parallel.Zero = "int8", 4, "mpi", 3
		}, []string{"-base int8", "-zero 3"}},
		{"base nf4 unfreeze", func(c *Config) {
			c.Precision.Base, c.Memory.Freeze, c.Memory.UnfreezeAt = "nf4", []string{"layers.0.*"}, 3
		}, []string{"-base nf4", "-unfreeze-at 3", "cannot train again"}},
		{"base int8 unfreeze", func(c *Config) {
			c.Precision.Base, c.Memory.Freeze, c.Memory.UnfreezeAt = "int8", []string{"layers.0.*"}, 3
		}, []string{"-base int8", "-unfreeze-at 3"}},
		{"base f32 bf16 weights", func(c *Config) { c.Precision.Base, c.Memory.LoRA.Rank, c.Precision.Weights = "f32", 4, "bf16" }, []string{"-base f32", "-weights bf16"}},
		{"base head chunked", func(c *Config) {
			c.Model.Name, c.Precision.Base, c.Memory.LoRA.Rank = "llama", "nf4+head", 4
		}, []string{"-base nf4+head", "-lm-head chunked", "use -lm-head full"}},
		{"base bf16 without amp", func(c *Config) { c.Precision.Base, c.Memory.LoRA.Rank = "bf16", 4 }, []string{"-base bf16", "needs -amp bf16"}},
		{"offload base zero 3", func(c *Config) {
			c.Memory.Offload.Mode, c.Memory.LoRA.Rank, c.Parallel.Engine, c.Parallel.Zero = "base", 4, "mpi", 3
		}, []string{"-offload base", "-zero 3", "use -zero 1 or 2"}},
		{"offload base unfreeze", func(c *Config) {
			c.Memory.Offload.Mode, c.Memory.Freeze, c.Memory.UnfreezeAt = "activations,base", []string{"layers.0.*"}, 3
		}, []string{"-offload activations,base", "-unfreeze-at 3", "trains again"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			c.set(&cfg)
			cfg = cfg.Resolved()
			err := cfg.Validate()
			if err == nil {
				t.Fatalf("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: does not name %q", err, w)
				}
			}
		})
	}
	// And every declared rule is covered above: a new rule needs a case.
	n := 0
	for _, tech := range techniques {
		n += len(tech.refuses) + len(tech.needs)
	}
	if n != 27 {
		t.Errorf("%d rules declared, 27 tested: add a case for the new one", n)
	}
}
