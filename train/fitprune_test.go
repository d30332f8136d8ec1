package train

import (
	"context"
	"fmt"
	"reflect"
	"testing"
)

// fitPruneConfigs are small runs whose -fit searches reach the optimizer
// tier at some budgets, each with the budgets to try (in percent of its
// need as given): full fine-tuning under Adam and AdamW on a device with
// memory of its own and on the CPU (where need counts the host's
// offloaded bytes too), with clipping (no step inside backward) and
// fp16's scaler, 8-bit Adam as given, LoRA over an nf4 base, and one
// rank of 4 under -dist, where ZeRO's stages and the optimizer's shard
// layout come in.
func fitPruneConfigs() []struct {
	name string
	cfg  Config
	pcts []int64
} {
	gpt := func(dev, opt string) Config {
		c := tinyGPT()
		c.Model.Width, c.Model.Layers, c.Model.Context, c.Optim.Batch, c.Model.Dropout = 64, 3, 32, 4, 0
		c.Device.Name, c.Optim.Name = dev, opt
		return c
	}
	clip := gpt("cuda", "adamw")
	clip.Optim.Clip, clip.Precision.AMP = 1, "fp16"
	lora := Default()
	lora.Model = ModelConfig{Name: "llama", Layers: 2, Width: 64, Heads: 4, KVHeads: 2, Hidden: 128, Vocab: 3000, Context: 1024}
	lora.Optim.Batch, lora.Output.Quiet, lora.Device.Name = 1, true, "cuda"
	lora.Memory.LoRA.Rank, lora.Precision.Base = 4, "nf4"
	dist := fitDistGPT()
	dist.Device.Name = "cuda"
	return []struct {
		name string
		cfg  Config
		pcts []int64
	}{
		{"gpt adam cuda", gpt("cuda", "adam"), []int64{110, 45, 25, 12, 4}},
		{"gpt adamw cpu", gpt("cpu", "adamw"), []int64{45, 25, 12, 4}},
		{"gpt adamw clip fp16 cuda", clip, []int64{45, 25, 12}},
		{"gpt adam8bit cuda", gpt("cuda", "adam8bit"), []int64{45, 25, 12}},
		{"llama lora nf4 cuda", lora, []int64{40, 15, 3}},
		{"gpt adam dist 4 ranks cuda", dist, []int64{40, 20}},
	}
}

// TestFitPruneSame: deferring the candidates whose optimizer's variants
// showed a floor over the budget changes nothing -fit says: on a grid of
// runs, device budgets from above the run as given down to a few
// percent of it, and host budgets (none, and 1 KiB, which rules out
// every offloading candidate, so that where only those fit the device
// the message is the host budget's), the search with fitPrune chooses
// exactly what the search without it chooses (configuration, peak and
// cost, and so flags), or fails with exactly its message, in no more
// plans; and it plans fewer somewhere, both where a choice is found and
// where nothing fits (there settle plans the deferred that could be the
// nearest miss, and is seen to).
func TestFitPruneSame(t *testing.T) {
	defer func(old bool) { fitPrune = old }(fitPrune)
	var fewerChosen, fewerFailed, settled int
	for _, rc := range fitPruneConfigs() {
		p, err := Plan(rc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", rc.name, err)
		}
		given := need(rc.cfg.Resolved(), p)
		hosts := []int64{0, 1 << 10}
		if rc.cfg.Device.Name == "cpu" {
			hosts = hosts[:1] // no host budget beside the one
		}
		for _, pct := range rc.pcts {
			for _, host := range hosts {
				budget := given * pct / 100
				t.Run(fmt.Sprintf("%s/%d%%/host %d", rc.name, pct, host), func(t *testing.T) {
					withHostCapacity(t, host)
					fitPrune = false
					want, ws, werr := fitSearched(context.Background(), rc.cfg, budget)
					fitPrune = true
					got, gs, gerr := fitSearched(context.Background(), rc.cfg, budget)
					if fmt.Sprint(gerr) != fmt.Sprint(werr) {
						t.Fatalf("with pruning: %v\nwithout: %v", gerr, werr)
					}
					if !reflect.DeepEqual(got, want) || got.Flags(rc.cfg) != want.Flags(rc.cfg) {
						t.Fatalf("with pruning chose %s %+v (cost %g)\nwithout: %s %+v (cost %g)",
							got.Flags(rc.cfg), got.Peak, got.Cost, want.Flags(rc.cfg), want.Peak, want.Cost)
					}
					if ws.pruned != 0 {
						t.Errorf("without pruning %d candidates were deferred", ws.pruned)
					}
					if gs.planned > ws.planned {
						t.Errorf("with pruning %d plans, without %d", gs.planned, ws.planned)
					}
					what := got.Flags(rc.cfg)
					if gerr != nil {
						what = gerr.Error()
					}
					if gs.planned < ws.planned {
						if gerr == nil {
							fewerChosen++
						} else {
							fewerFailed++
						}
					}
					settled += gs.settled
					t.Logf("%d plans with pruning (%d deferred, %d planned after), %d without: %s", gs.planned, gs.pruned, gs.settled, ws.planned, what)
				})
			}
		}
	}
	if fewerChosen == 0 || fewerFailed == 0 || settled == 0 {
		t.Errorf("pruning saved plans in %d searches that chose and %d that found nothing, settle planned %d; want some of each", fewerChosen, fewerFailed, settled)
	}
}

// TestOptimFloorBoundsEveryOptimizer: the floor a plan gives
// (optimFloor) is at most the need of every configuration that differs
// from it only in the optimizer, on a grid of runs and of the techniques
// that meet the optimizer's step: the step inside backward, clipping,
// accumulation, fp16's scaler, bf16 weights (stochastic rounding),
// checkpointing, offloading (the optimizer or activations), and ZeRO's
// stages, whose shard layout follows the optimizer's state.
func TestOptimFloorBoundsEveryOptimizer(t *testing.T) {
	techs := []struct {
		name string
		set  func(*Config)
	}{
		{"plain", func(*Config) {}},
		{"step in backward", func(c *Config) { c.Memory.StepInBackward = true }},
		{"clip accum", func(c *Config) { c.Optim.Clip, c.Memory.Accum = 1, 2 }},
		{"fp16", func(c *Config) { c.Precision.AMP = "fp16" }},
		{"bf16 weights checkpoint", func(c *Config) { c.Precision.AMP, c.Precision.Weights, c.Memory.Checkpoint = "bf16", "bf16", "every" }},
		{"offload all", func(c *Config) { c.Memory.Offload.Mode = "all" }},
		{"offload activations step in backward", func(c *Config) {
			c.Memory.Offload.Mode, c.Memory.StepInBackward = "activations", true
		}},
		{"zero 1", func(c *Config) { c.Parallel.Engine, c.Parallel.Ranks, c.Parallel.Zero = "mpi", 4, 1 }},
		{"zero 2", func(c *Config) { c.Parallel.Engine, c.Parallel.Ranks, c.Parallel.Zero = "mpi", 4, 2 }},
		{"zero 3", func(c *Config) { c.Parallel.Engine, c.Parallel.Ranks, c.Parallel.Zero = "mpi", 4, 3 }},
		{"lora nf4", func(c *Config) { c.Memory.LoRA.Rank, c.Precision.Base, c.Precision.AMP = 4, "nf4", "bf16" }},
	}
	// Two shapes: activations outweigh the model state in the first (the
	// floor is the activations' peak), the model state the activations
	// in the second (the floor is the total less the categories the
	// optimizer changes).
	shapes := []struct {
		name                          string
		width, layers, context, batch int
	}{
		{"activations", 64, 3, 32, 4},
		{"state", 128, 3, 8, 2},
	}
	checked := 0
	for _, dev := range []string{"cuda", "cpu"} {
		for _, sh := range shapes {
			for _, tech := range techs {
				t.Run(dev+"/"+sh.name+"/"+tech.name, func(t *testing.T) {
					type planned struct {
						opt   string
						need  int64
						floor int64
					}
					var plans []planned
					for _, opt := range []string{"adam", "adamw", "adam8bit", "adamw8bit", "adafactor", "sgd"} {
						c := tinyGPT()
						c.Model.Width, c.Model.Layers, c.Model.Context, c.Optim.Batch, c.Model.Dropout = sh.width, sh.layers, sh.context, sh.batch, 0
						c.Device.Name, c.Optim.Name = dev, opt
						tech.set(&c)
						c = c.Resolved()
						if c.Validate() != nil {
							continue
						}
						p, err := Plan(c)
						if err != nil {
							t.Fatalf("-optim %s: %v", opt, err)
						}
						plans = append(plans, planned{opt, need(c, p), optimFloor(c, p)})
					}
					if len(plans) < 2 {
						t.Skip("fewer than two optimizers apply")
					}
					for _, a := range plans {
						for _, b := range plans {
							if a.floor > b.need {
								t.Errorf("-optim %s's floor %d is over -optim %s's need %d", a.opt, a.floor, b.opt, b.need)
							}
							checked++
						}
					}
				})
			}
		}
	}
	if checked == 0 {
		t.Error("nothing compared")
	}
}
