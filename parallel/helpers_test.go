package parallel_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/memfit/memfit/accumulate"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// errDied is returned by a rank that simulates dying: runRanks does not
// close its communicator.
var errDied = errors.New("died")

// runRanks runs fn for every rank of an in-process group, each in its own
// goroutine, closes each rank's communicator when fn returns (as a program
// would, deferred), and returns their errors by rank.
func runRanks(comms []parallel.Comm, fn func(c parallel.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
				}
				if errs[r] == errDied {
					errs[r] = nil
					return
				}
				c.Close()
			}()
			errs[r] = fn(c)
		})
	}
	wg.Wait()
	return errs
}

// counting wraps a Comm and counts its collectives.
type counting struct {
	parallel.Comm
	calls int
}

func (c *counting) AllReduce(t *tensor.Tensor, op parallel.Op) error {
	c.calls++
	return c.Comm.AllReduce(t, op)
}
func (c *counting) ReduceScatter(out, in *tensor.Tensor, op parallel.Op) error {
	c.calls++
	return c.Comm.ReduceScatter(out, in, op)
}
func (c *counting) AllGather(out, in *tensor.Tensor) error {
	c.calls++
	return c.Comm.AllGather(out, in)
}
func (c *counting) Broadcast(t *tensor.Tensor, root int) error {
	c.calls++
	return c.Comm.Broadcast(t, root)
}

// The test model: an MLP of P = 10·24+24 + 24·5+5 = 389 parameters (odd,
// so that a ZeRO shard of 2 ranks is padded).
var widths = []int{10, 24, 5}

const (
	paramCount = 389
	globalRows = 8 // examples per step over all ranks
	classes    = 5
)

// batch returns rows [lo, hi) of step's global batch: fixed synthetic
// inputs and class targets.
func batch(dev *cpu.Device, step, lo, hi int) (x, y *tensor.Tensor, err error) {
	xs := make([]float32, 0, (hi-lo)*widths[0])
	ys := make([]int32, 0, hi-lo)
	for r := lo; r < hi; r++ {
		for j := range widths[0] {
			xs = append(xs, float32(math.Sin(float64(step*131+r*17+j*7)*0.37)))
		}
		ys = append(ys, int32((step*3+r*7)%classes))
	}
	x, err = tensor.FromFloat32(dev, xs, []int{hi - lo, widths[0]}, memory.Data)
	if err != nil {
		return nil, nil, err
	}
	y, err = tensor.FromInt32(dev, ys, []int{hi - lo}, memory.Data)
	return x, y, err
}

type mode int

const (
	plain mode = iota // one rank, no dist
	ddp
	zero1
	zero2
	zero2ov   // stage 2, reducing during the last micro-batch's backward
	zero2each // stage 2, reducing during every micro-batch's backward
)

func (m mode) String() string {
	return [...]string{"plain", "ddp", "zero1", "zero2", "zero2ov", "zero2each"}[m]
}

func newAdam(ps []*tensor.Tensor) (*optim.Optimizer, error) {
	return optim.NewAdamW(ps, optim.AdamW{LR: 1e-2, WeightDecay: 0.01})
}

// result is what one rank's training run leaves.
type result struct {
	params []float32 // all parameters, concatenated
	calls  int       // collectives issued after construction
}

// trainRank trains the test MLP on c's rank for steps steps of the global
// batch, accum micro-batches per step, and returns its parameters. Ranks
// other than 0 start from other weights: construction must broadcast.
func trainRank(c parallel.Comm, m mode, steps, accum int, bucketBytes int64, measure func(stage string, st memory.Stats)) (result, error) {
	var res result
	dev := cpu.New(cpu.Threads(1))
	model, err := models.NewMLP(dev, models.MLPConfig{Widths: widths, Seed: 1 + uint64(c.Rank())*100})
	if err != nil {
		return res, err
	}
	defer nn.Release(model)
	params := model.Parameters()
	cc := &counting{Comm: c}
	var (
		opt *optim.Optimizer
		d   *parallel.DDP
		z   *parallel.ZeRO
	)
	switch m {
	case plain:
		opt, err = newAdam(params)
	case ddp:
		opt, err = newAdam(params)
		if err == nil {
			d, err = parallel.NewDDP(cc, params, parallel.DDPConfig{BucketBytes: bucketBytes})
		}
	case zero1, zero2, zero2ov, zero2each:
		z, err = parallel.NewZeRO(cc, params, parallel.ZeROConfig{Stage: min(int(m-ddp), 2), BucketBytes: bucketBytes}, newAdam)
		if z != nil {
			defer z.Release()
			opt = z.Optimizer()
		}
	}
	if err != nil {
		return res, err
	}
	defer opt.Release()
	cc.calls = 0
	per := globalRows / c.Size()
	for step := range steps {
		x, y, err := batch(dev, step, c.Rank()*per, (c.Rank()+1)*per)
		if err != nil {
			return res, err
		}
		micro, err := accumulate.Split(x, y, accum)
		if err != nil {
			return res, err
		}
		if measure != nil {
			dev.Memory().ResetPeak()
		}
		k := 0
		_, err = accumulate.Window(micro, func(s *tensor.Scope, mb accumulate.Micro) *tensor.Tensor {
			if measure != nil {
				measure("micro-batch", dev.Memory().Stats())
			}
			if k++; (m == zero2ov && k == len(micro)) || m == zero2each {
				if err := z.ReduceDuringBackward(); err != nil {
					panic(err)
				}
			}
			r := nn.NewRun(s, 0)
			return s.CrossEntropy(model.Forward(r, mb.Inputs), mb.Targets, tensor.CrossEntropyOptions{})
		}, nil)
		for _, mb := range micro {
			mb.Release()
		}
		x.Release()
		y.Release()
		if err != nil {
			return res, err
		}
		if measure != nil {
			measure("backward", dev.Memory().Stats())
			dev.Memory().ResetPeak() // peaks from here on are the communication's
		}
		switch m {
		case plain:
			err = opt.Step()
		case ddp:
			if err = d.ReduceGradients(); err == nil {
				if measure != nil {
					measure("reduced", dev.Memory().Stats())
				}
				err = opt.Step()
			}
		case zero1, zero2, zero2ov, zero2each:
			if err = z.ReduceGradients(); err == nil {
				if measure != nil {
					measure("reduced", dev.Memory().Stats())
				}
				err = z.Update()
			}
		}
		for _, p := range params {
			p.SetGrad(nil)
		}
		if err != nil {
			return res, fmt.Errorf("step %d: %w", step, err)
		}
		if measure != nil {
			measure("stepped", dev.Memory().Stats())
		}
	}
	for _, p := range params {
		res.params = append(res.params, p.Float32s()...)
	}
	res.calls = cc.calls
	return res, nil
}

// closeTo reports the largest |a-b| / (|b| + 1e-3·max|b|) over elements.
func relErr(a, b []float32) float64 {
	var scale float64
	for _, v := range b {
		scale = max(scale, math.Abs(float64(v)))
	}
	var worst float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		worst = max(worst, d/(math.Abs(float64(b[i]))+1e-3*scale))
	}
	return worst
}

func checkErrs(t *testing.T, errs []error) {
	t.Helper()
	failed := false
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
}
