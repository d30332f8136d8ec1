//go:build mpi

package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/memfit/memfit/accumulate"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

var (
	steps   = flag.Int("steps", 20, "training steps per mode")
	die     = flag.Int("die", -1, "rank that exits (status 3) at its third training step, to check failure handling")
	hang    = flag.Int("hang", -1, "rank that stops taking part (sleeps) at its third training step")
	timeout = flag.Duration("timeout", 30*time.Second, "collective watchdog")
)

var widths = []int{10, 24, 5}

const globalRows = 8

func run() error {
	flag.Parse()
	c, err := parallel.NewMPI(parallel.MPITimeout(*timeout))
	if err != nil {
		return err
	}
	r, n := c.Rank(), c.Size()
	if globalRows%n != 0 {
		return fmt.Errorf("%d ranks do not divide the batch of %d", n, globalRows)
	}
	if err := collectives(c); err != nil {
		return fmt.Errorf("rank %d: %w", r, err)
	}
	fmt.Printf("rank %d of %d: collectives ok\n", r, n)
	for _, o := range []struct {
		name  string
		new   func([]*tensor.Tensor) (*optim.Optimizer, error)
		modes []string
	}{
		{"adamw", newAdam, []string{"ddp", "zero1", "zero2", "zero3"}},
		// Adafactor under ZeRO: each rank owns whole tensors.
		{"adafactor", newAdafactor, []string{"ddp", "zero1", "zero2"}},
	} {
		newOpt = o.new
		ref, _, err := train(c, "plain", true)
		if err != nil {
			return err
		}
		for _, mode := range o.modes {
			got, state, err := train(c, mode, false)
			if err != nil {
				return fmt.Errorf("rank %d: %s %s: %w", r, o.name, mode, err)
			}
			var worst float64
			for i := range got {
				worst = max(worst, math.Abs(float64(got[i]-ref[i]))/(math.Abs(float64(ref[i]))+1e-3))
			}
			fmt.Printf("rank %d: %-9s %-5s %d steps: relative error %.2g against one process; optimizer state %d B\n", r, o.name, mode, *steps, worst, state)
			if worst > 1e-5 {
				return fmt.Errorf("rank %d: %s %s: relative error %.3g", r, o.name, mode, worst)
			}
		}
	}
	return c.Close()
}

func collectives(c parallel.Comm) error {
	dev := cpu.New()
	r, n := float32(c.Rank()), c.Size()
	x, _ := tensor.FromFloat32(dev, []float32{r, 1}, []int{2}, memory.Temporary)
	if err := c.AllReduce(x, parallel.Sum); err != nil {
		return err
	}
	if got, want := x.Float32s(), []float32{float32(n * (n - 1) / 2), float32(n)}; !slices.Equal(got, want) {
		return fmt.Errorf("all_reduce: %v, want %v", got, want)
	}
	in := make([]float32, n)
	for q := range in {
		in[q] = float32(q) + r
	}
	it, _ := tensor.FromFloat32(dev, in, []int{n}, memory.Temporary)
	out, _ := tensor.FromFloat32(dev, []float32{0}, []int{1}, memory.Temporary)
	if err := c.ReduceScatter(out, it, parallel.Avg); err != nil {
		return err
	}
	if got, want := out.Float32s()[0], r+float32(n-1)/2; got != want {
		return fmt.Errorf("reduce_scatter: %v, want %v", got, want)
	}
	if err := c.AllGather(it, out); err != nil {
		return err
	}
	for q, v := range it.Float32s() {
		if v != float32(q)+float32(n-1)/2 {
			return fmt.Errorf("all_gather: %v", it.Float32s())
		}
	}
	b, _ := tensor.FromFloat32(dev, []float32{r + 7}, []int{1}, memory.Temporary)
	if err := c.Broadcast(b, n-1); err != nil {
		return err
	}
	if got := b.Float32s()[0]; got != float32(n-1)+7 {
		return fmt.Errorf("broadcast: %v", got)
	}
	return c.Barrier()
}

func newAdam(ps []*tensor.Tensor) (*optim.Optimizer, error) {
	return optim.NewAdamW(ps, optim.AdamW{LR: 1e-2, WeightDecay: 0.01})
}

func newAdafactor(ps []*tensor.Tensor) (*optim.Optimizer, error) {
	return optim.NewAdafactor(ps, optim.Adafactor{LR: 1e-2})
}

// newOpt is the optimizer of the modes being checked.
var newOpt = newAdam

// train runs steps on this rank's rows of a fixed synthetic batch (all
// rows when alone) and returns the parameters and the optimizer state bytes.
func train(c parallel.Comm, mode string, alone bool) ([]float32, int64, error) {
	dev := cpu.New(cpu.Threads(1))
	model, err := models.NewMLP(dev, models.MLPConfig{Widths: widths, Seed: 1 + uint64(c.Rank())*100*btoi(!alone)})
	if err != nil {
		return nil, 0, err
	}
	defer nn.Release(model)
	params := model.Parameters()
	var (
		opt *optim.Optimizer
		d   *parallel.DDP
		z   *parallel.ZeRO
		z3  *parallel.ZeRO3
	)
	switch mode {
	case "plain":
		opt, err = newOpt(params)
	case "ddp":
		if opt, err = newOpt(params); err == nil {
			d, err = parallel.NewDDP(c, params, parallel.DDPConfig{BucketBytes: 64})
		}
	case "zero3":
		z3, err = parallel.NewZeRO3(c, model, parallel.ZeRO3Config{BucketBytes: 64}, newOpt)
		if z3 != nil {
			defer z3.Release()
			opt = z3.Optimizer()
			model.SetBlockRunner(z3.Runner(nil))
		}
	default:
		z, err = parallel.NewZeRO(c, params, parallel.ZeROConfig{Stage: int(mode[4] - '0'), BucketBytes: 64}, newOpt)
		if z != nil {
			defer z.Release()
			opt = z.Optimizer()
		}
	}
	if err != nil {
		return nil, 0, err
	}
	defer opt.Release()
	lo, hi := 0, globalRows
	if !alone {
		per := globalRows / c.Size()
		lo, hi = c.Rank()*per, (c.Rank()+1)*per
	}
	for step := range *steps {
		if step == 2 && c.Rank() == *die && !alone {
			fmt.Printf("rank %d: exiting at step %d of %s (-die)\n", c.Rank(), step, mode)
			os.Exit(3)
		}
		if step == 2 && c.Rank() == *hang && !alone {
			fmt.Printf("rank %d: hanging at step %d of %s (-hang)\n", c.Rank(), step, mode)
			select {}
		}
		x, y := batch(dev, step, lo, hi)
		micro, err := accumulate.Split(x, y, 2)
		if err != nil {
			return nil, 0, err
		}
		_, err = accumulate.Window(micro, func(s *tensor.Scope, mb accumulate.Micro) *tensor.Tensor {
			if z3 != nil {
				if err := z3.BeforeForward(); err != nil {
					panic(&tensor.Error{Op: "mpicheck", Msg: err.Error()})
				}
			}
			return s.CrossEntropy(model.Forward(nn.NewRun(s, 0), mb.Inputs), mb.Targets, tensor.CrossEntropyOptions{})
		}, nil)
		for _, mb := range micro {
			mb.Release()
		}
		x.Release()
		y.Release()
		if err != nil {
			return nil, 0, err
		}
		switch {
		case d != nil:
			if err = d.ReduceGradients(); err == nil {
				err = opt.Step()
			}
		case z != nil:
			err = z.Step()
		case z3 != nil:
			err = z3.Step()
		default:
			err = opt.Step()
		}
		for _, p := range params {
			p.SetGrad(nil)
		}
		if err != nil {
			if z3 != nil && z3.Err() != nil {
				err = z3.Err() // names the rank at fault
			}
			return nil, 0, fmt.Errorf("step %d: %w", step, err)
		}
	}
	var out []float32
	read := func() error {
		for _, p := range params {
			out = append(out, p.Float32s()...)
		}
		return nil
	}
	if z3 != nil {
		err = z3.GatherAll(read) // the parameters are whole only while gathered
	} else {
		err = read()
	}
	return out, dev.Memory().Stats().Category(memory.OptimizerState).Current, err
}

func btoi(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func batch(dev *cpu.Device, step, lo, hi int) (x, y *tensor.Tensor) {
	var xs []float32
	var ys []int32
	for r := lo; r < hi; r++ {
		for j := range widths[0] {
			xs = append(xs, float32(math.Sin(float64(step*131+r*17+j*7)*0.37)))
		}
		ys = append(ys, int32((step*3+r*7)%widths[2]))
	}
	x, _ = tensor.FromFloat32(dev, xs, []int{hi - lo, widths[0]}, memory.Data)
	y, _ = tensor.FromInt32(dev, ys, []int{hi - lo}, memory.Data)
	return x, y
}
