package train_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/train"
)

// The Trainer from the library: a configuration, a device, a run.
func ExampleNew() {
	cfg := train.Default()
	cfg.Model.Layers, cfg.Model.Width, cfg.Optim.Batch, cfg.Optim.Steps, cfg.Output.Quiet = 1, 64, 32, 50, true
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
	cfg.Model.Name, cfg.Model.Layers, cfg.Model.Width, cfg.Model.Heads, cfg.Model.Context, cfg.Optim.Batch = "gpt", 2, 64, 4, 32, 8
	full, _ := train.Plan(cfg)
	cfg.Memory.Checkpoint = "every"
	ckpt, _ := train.Plan(cfg)
	fmt.Println(ckpt.Activation < full.Activation, ckpt.Parameter == full.Parameter)
	// Output: true true
}

// Data parallelism from the library: two ranks in one process (dist's
// in-process engine; under mpirun, parallel.NewMPI's communicator instead),
// each training on its half of every global batch, with ZeRO stage 1
// sharding Adam's state between them.
func ExampleNewDistributed() {
	cfg := train.Default()
	cfg.Model.Layers, cfg.Model.Width, cfg.Optim.Batch, cfg.Optim.Steps, cfg.Output.Quiet, cfg.Parallel.Zero = 1, 64, 16, 20, true, 1
	comms := parallel.NewLocal(2)
	state := make([]int64, 2)
	params := make([][]float32, 2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			defer c.Close()
			dev, _ := train.NewDevice(cfg)
			t, err := train.NewDistributed(cfg, dev, c, nil)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer t.Close()
			t.Run(context.Background())
			state[r] = t.Opt.StateBytes()
			for _, p := range t.Model.Parameters() {
				params[r] = append(params[r], p.Float32s()...)
			}
		})
	}
	wg.Wait()
	fmt.Println("replicas equal:", slices.Equal(params[0], params[1]))
	fmt.Println("each rank holds half the Adam state:", state[0]+state[1] == 8*int64(len(params[0])))
	// Output:
	// replicas equal: true
	// each rank holds half the Adam state: true
}
