package parallel_test

import (
	"fmt"
	"sync"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// ExampleNewZeRO3 shards a GPT's parameters over two in-process ranks
// (goroutines; under mpirun, parallel.NewMPI gives each process its rank).
// The model is built deferred, so its parameters take no memory until
// NewZeRO3 draws them group by group, and the gathers are prefetched,
// which needs every collective of the rank to go through an Async.
func ExampleNewZeRO3() {
	cfg := models.GPTConfig{Layers: 2, Heads: 2, Dim: 16, Context: 8, Vocab: 32, Defer: true}
	comms := parallel.NewLocal(2)
	losses := make([]float64, 2)
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Go(func() {
			defer c.Close()
			r := c.Rank()
			dev := cpu.New(cpu.Threads(1))
			model, err := models.NewGPT(dev, cfg)
			if err != nil {
				panic(err)
			}
			defer nn.Release(model)
			c = parallel.NewAsync(c)
			z, err := parallel.NewZeRO3(c, model, parallel.ZeRO3Config{Prefetch: true}, func(shard []*tensor.Tensor) (*optim.Optimizer, error) {
				return optim.NewAdamW(shard, optim.AdamW{LR: 1e-2})
			})
			if err != nil {
				panic(err)
			}
			defer z.Release()
			model.SetBlockRunner(z.Runner(nil))
			// Each rank trains on its half of a global batch of 4.
			xs := make([]int32, 2*cfg.Context)
			ys := make([]int32, len(xs))
			for i := range xs {
				xs[i] = int32((i + 3*r) % cfg.Vocab)
				ys[i] = int32((i + 3*r + 1) % cfg.Vocab)
			}
			x, _ := tensor.FromInt32(dev, xs, []int{2, cfg.Context}, memory.Data)
			y, _ := tensor.FromInt32(dev, ys, []int{2, cfg.Context}, memory.Data)
			defer x.Release()
			defer y.Release()
			for range 5 {
				err := tensor.Step(func(s *tensor.Scope) error {
					if err := z.BeforeForward(); err != nil {
						return err
					}
					loss := model.TokenLoss(nn.NewRun(s, 0), x, y, tensor.CrossEntropyOptions{})
					losses[r] = loss.Item()
					loss.Backward()
					return nil
				})
				if err == nil {
					err = z.Step()
				}
				if err != nil {
					panic(err)
				}
			}
			if r == 0 {
				fmt.Printf("gathers started ahead: %v\n", z.Prefetches > 0)
			}
		})
	}
	wg.Wait()
	fmt.Printf("the loss fell on both ranks: %v\n", losses[0] < 3.4 && losses[1] < 3.4)
	// Output:
	// gathers started ahead: true
	// the loss fell on both ranks: true
}
