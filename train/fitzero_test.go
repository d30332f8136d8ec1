package train

import (
	"strings"
	"testing"
)

// fitDistGPT is a GPT whose model state outweighs its activations (width
// 128 over 4 sequences of 16 tokens, about 0.8M parameters), planned as
// one rank of 4, so that the ZeRO stages separate clearly: 16.6 MB of
// plan unsharded, 12.4 at stage 1, 7.8 at stage 2, 6.5 at stage 3.
func fitDistGPT() Config {
	c := tinyGPT()
	c.Model.Width, c.Model.Layers, c.Model.Context, c.Optim.Batch, c.Model.Dropout = 128, 4, 16, 4, 0
	c.Parallel.Engine, c.Parallel.Ranks = "mpi", 4
	return c
}

func planTotal(t *testing.T, cfg Config) int64 {
	t.Helper()
	p, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p.Total
}

// smallestAt is the smallest plan of cfg at ZeRO stage z over the
// accumulation × checkpointing × autocast candidates Fit tries.
func smallestAt(t *testing.T, cfg Config, z int) int64 {
	t.Helper()
	var least int64 = -1
	for accum := 1; accum <= cfg.Optim.Batch; accum *= 2 {
		for _, ck := range []string{"off", "sqrt", "every"} {
			for _, a := range []string{"off", "bf16"} {
				c := cfg
				c.Parallel.Zero, c.Memory.Accum, c.Memory.Checkpoint, c.Precision.AMP = z, accum, ck, a
				if p := planTotal(t, c); least < 0 || p < least {
					least = p
				}
			}
		}
	}
	return least
}

// checkChoice asserts that what Fit chose is a valid configuration whose
// own plan is the one Fit reports, within budget.
func checkChoice(t *testing.T, c Choice, budget int64) {
	t.Helper()
	if err := c.Config.Validate(); err != nil {
		t.Errorf("Fit chose a configuration Validate refuses: %v", err)
	}
	if got := planTotal(t, c.Config); got != c.Peak.Total || got > budget {
		t.Errorf("the chosen configuration plans at %d (Fit said %d), budget %d", got, c.Peak.Total, budget)
	}
}

// TestFitRaisesZeroStage: a budget that one rank of 4 meets only with its
// model state sharded gets the ZeRO stage that fits, before 8-bit state
// or offload, with the optimizer, weights and offload as given; a budget
// met as given changes nothing; the stage given is never lowered.
func TestFitRaisesZeroStage(t *testing.T) {
	cfg := fitDistGPT()
	at := func(z int) Config {
		c := cfg
		c.Parallel.Zero = z
		return c
	}
	// Fit's precondition for each stage: the stages below cannot fit it,
	// whatever the accumulation, checkpointing and autocast.
	below := []int64{smallestAt(t, cfg, 0), smallestAt(t, cfg, 1), smallestAt(t, cfg, 2)}
	eightBit := at(0)
	eightBit.Optim.Name = "adam8bit"
	for _, c := range []struct {
		name   string
		given  int   // the stage asked for
		budget int64 // bytes
		want   int   // the stage chosen
		needed bool  // the budget is below every lower stage's smallest plan
	}{
		{"fits as given", 0, planTotal(t, at(0)), 0, false},
		{"stage 1, where 8-bit Adam would fit too", 0, planTotal(t, at(1)), 1, true},
		{"stage 2", 0, planTotal(t, at(2)), 2, true},
		{"stage 3", 0, planTotal(t, at(3)), 3, true},
		{"stage given is kept", 2, planTotal(t, at(0)), 2, false},
		{"from stage 1 to 3", 1, planTotal(t, at(3)), 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.needed && c.budget >= below[c.want-1] {
				t.Fatalf("budget %d: stage %d's smallest plan %d fits it too; the test needs another model", c.budget, c.want-1, below[c.want-1])
			}
			given := at(c.given)
			got, err := Fit(given, c.budget)
			if err != nil {
				t.Fatal(err)
			}
			checkChoice(t, got, c.budget)
			g := got.Config
			if g.Parallel.Zero != c.want || g.Optim.Name != given.Optim.Name || g.Precision.Weights != given.Precision.Weights || g.Memory.Offload.Mode != given.Memory.Offload.Mode {
				t.Errorf("Fit(%d) chose -zero %d -optim %s -weights %q -offload %q; want -zero %d with the rest as given",
					c.budget, g.Parallel.Zero, g.Optim.Name, g.Precision.Weights, g.Memory.Offload.Mode, c.want)
			}
			if c.want == c.given && (g.Memory.Accum != given.Memory.Accum || g.Memory.Checkpoint != given.Memory.Checkpoint || g.Precision.AMP != given.Precision.AMP) {
				t.Errorf("Fit(%d) changed a run that fits as given: -accum %d -checkpoint %s -amp %s", c.budget, g.Memory.Accum, g.Memory.Checkpoint, g.Precision.AMP)
			}
		})
	}
	// The stage-1 case is a choice between exact and approximate: 8-bit
	// state without sharding would have fitted too.
	if p := planTotal(t, eightBit); p > planTotal(t, at(1)) {
		t.Errorf("8-bit Adam unsharded plans at %d, above stage 1's %d: the stage-1 case does not show ZeRO tried first", p, planTotal(t, at(1)))
	}
}

// TestFitZeroRespectsValidate: what Config.Validate refuses is skipped,
// not an error: stage 3 with Adafactor or bf16 weights (Fit stops at
// stage 2), any stage with -unfreeze-at (Fit turns to 8-bit state).
func TestFitZeroRespectsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want int
	}{
		{"adafactor", func(c *Config) { c.Optim.Name = "adafactor" }, 2},
		{"bf16 weights", func(c *Config) { c.Precision.Weights = "bf16" }, 2},
		{"unfreeze-at", func(c *Config) { c.Memory.Freeze, c.Memory.UnfreezeAt = []string{"blocks.0.*"}, 2 }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fitDistGPT()
			c.mod(&cfg)
			// Below the smallest plan at the highest stage it may take.
			budget := smallestAt(t, cfg, c.want) - 1
			got, err := Fit(cfg, budget)
			if err != nil {
				if strings.Contains(err.Error(), "nothing fits") {
					return // every candidate was planned, none refused
				}
				t.Fatal(err)
			}
			checkChoice(t, got, budget)
			g := got.Config
			if g.Parallel.Zero > c.want || (g.Parallel.Zero == 3 && (g.Optim.Name == "adafactor" || g.Precision.Weights == "bf16")) {
				t.Errorf("Fit(%d) chose -zero %d -optim %s -weights %q", budget, g.Parallel.Zero, g.Optim.Name, g.Precision.Weights)
			}
		})
	}
}

// TestFitNeverShardsOneProcess: without ranks to shard over (no -dist, or
// -dist planned as one process or one rank) Fit never sets -zero; it
// turns to 8-bit state where a rank of 4 would have been sharded.
func TestFitNeverShardsOneProcess(t *testing.T) {
	for _, c := range []struct {
		name  string
		dist  string
		ranks int
	}{
		{"no -dist", "off", 0},
		{"-dist without -ranks", "mpi", 0},
		{"one rank", "mpi", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := fitDistGPT()
			cfg.Parallel.Engine, cfg.Parallel.Ranks = c.dist, c.ranks
			eightBit := cfg
			eightBit.Optim.Name = "adam8bit"
			budget := planTotal(t, eightBit)
			got, err := Fit(cfg, budget)
			if err != nil {
				t.Fatal(err)
			}
			checkChoice(t, got, budget)
			if got.Config.Parallel.Zero != 0 || got.Config.Optim.Name != "adam8bit" {
				t.Errorf("Fit(%d) chose -zero %d -optim %s; want -zero 0 -optim adam8bit", budget, got.Config.Parallel.Zero, got.Config.Optim.Name)
			}
		})
	}
}

// TestFitNothingFitsSaysZero: the error names the stage of the smallest
// plan and suggests more ranks under -dist, and data parallelism without.
func TestFitNothingFitsSaysZero(t *testing.T) {
	// The whole search runs before the error: a small model keeps it short.
	dist := tinyGPT()
	dist.Optim.Batch, dist.Model.Dropout, dist.Parallel.Engine, dist.Parallel.Ranks = 2, 0, "mpi", 2
	one := dist
	one.Parallel.Engine, one.Parallel.Ranks = "off", 0
	for _, c := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"distributed", dist, []string{" -zero ", "more ranks (-ranks"}},
		{"one process", one, []string{"-dist mpi -zero 1, 2 or 3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Fit(c.cfg, 1<<10)
			if err == nil {
				t.Fatal("Fit(1KiB) found something")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
