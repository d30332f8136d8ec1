package train_test

import (
	"context"
	"fmt"

	"github.com/memfit/memfit/train"
)

// The Trainer from the library: a configuration, a device, a run.
func ExampleNew() {
	cfg := train.Default()
	cfg.Layers, cfg.Width, cfg.Batch, cfg.Steps, cfg.Quiet = 1, 64, 32, 50, true
	dev, _ := train.NewDevice(cfg)
	t, err := train.New(cfg, dev, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	s, _ := t.Run(context.Background())
	fmt.Println(s.Steps, s.FinalLoss < 2.3, s.PeakBytes.OptimizerState == 2*s.PeakBytes.Parameter)
	// Output: 50 true true
}

// The planner predicts the peak memory of a configuration without
// training it (one traced step on the meta device).
func ExamplePlan() {
	cfg := train.Default()
	cfg.Model, cfg.Layers, cfg.Width, cfg.Heads, cfg.Context, cfg.Batch = "gpt", 2, 64, 4, 32, 8
	full, _ := train.Plan(cfg)
	cfg.Checkpoint = "every"
	ckpt, _ := train.Plan(cfg)
	fmt.Println(ckpt.Activation < full.Activation, ckpt.Parameter == full.Parameter)
	// Output: true true
}
