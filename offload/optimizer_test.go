package offload_test

import (
	"math"
	"slices"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// trainSteps runs n steps of opt on m; step runs the optimizer (plain or
// through an offload.Optimizer). It returns each step's loss bits and
// the parameters' bits at the end.
func trainSteps(t *testing.T, m model, n int, step func() error, zero func()) ([]uint64, [][]uint32) {
	t.Helper()
	var losses []uint64
	for range n {
		err := tensor.Step(func(s *tensor.Scope) error {
			logits := m.m.Forward(nn.NewRun(s, 7), m.in)
			flat := s.Reshape(logits, -1, m.classes)
			l := s.CrossEntropy(flat, m.tgt, tensor.CrossEntropyOptions{})
			losses = append(losses, math.Float64bits(l.Item()))
			l.Backward()
			return step()
		})
		zero()
		if err != nil {
			t.Fatal(err)
		}
	}
	var ps [][]uint32
	for _, p := range m.m.Parameters() {
		var bits []uint32
		for _, v := range p.Float32s() {
			bits = append(bits, math.Float32bits(v))
		}
		ps = append(ps, bits)
	}
	return losses, ps
}

// TestOptimizerOffload: AdamW with its state and the master weights on a
// second allocator gives the losses and parameters of AdamW on the
// model's own, bit for bit; the device holds no optimizer state, the
// host holds exactly the state, the masters and (during the step) the
// gradients, and nothing is left over on either side.
func TestOptimizerOffload(t *testing.T) {
	for _, b := range builders {
		for _, name := range []string{"adamw", "sgd", "adafactor"} {
			t.Run(b.name+"/"+name, func(t *testing.T) {
				dev := cpu.New()
				m := b.make(t, dev, 2, 0.1)
				defer m.release()
				opt, err := optim.New(name, m.m.Parameters(), optim.Settings{LR: 1e-2, WeightDecay: 0.1})
				if err != nil {
					t.Fatal(err)
				}
				wantLoss, wantParams := trainSteps(t, m, 3, opt.Step, opt.ZeroGrad)
				wantState := dev.Memory().Stats().Category(memory.OptimizerState).Current
				opt.Release()

				dev2, host := cpu.New(), cpu.New()
				m2 := b.make(t, dev2, 2, 0.1)
				defer m2.release()
				off, err := offload.NewOptimizer(host, m2.m.Parameters())
				if err != nil {
					t.Fatal(err)
				}
				defer off.Release()
				hopt, err := optim.New(name, off.Masters(), optim.Settings{LR: 1e-2, WeightDecay: 0.1})
				if err != nil {
					t.Fatal(err)
				}
				defer hopt.Release()
				dev2.Memory().ResetPeak()
				gotLoss, gotParams := trainSteps(t, m2, 3, func() error { return off.Step(hopt.Step) }, off.ZeroGrad)
				if !slices.Equal(gotLoss, wantLoss) {
					t.Errorf("losses differ: %v, want %v", gotLoss, wantLoss)
				}
				for i := range wantParams {
					if !slices.Equal(gotParams[i], wantParams[i]) {
						t.Errorf("parameter %s differs", m2.m.Parameters()[i].Name())
					}
				}
				ds, hs := dev2.Memory().Stats(), host.Memory().Stats()
				params := ds.Category(memory.Parameter).Current
				for _, c := range []struct {
					what      string
					got, want int64
				}{
					{"device optimizer state peak", ds.Category(memory.OptimizerState).Peak, 0},
					{"device gradients", ds.Category(memory.Gradient).Current, 0},
					{"device gradient peak", ds.Category(memory.Gradient).Peak, params},
					{"host optimizer state", hs.Category(memory.OptimizerState).Current, wantState},
					{"host parameters (masters)", hs.Category(memory.Parameter).Current, params},
					{"host gradients", hs.Category(memory.Gradient).Current, 0},
					{"host gradient peak", hs.Category(memory.Gradient).Peak, params},
					{"host activations", hs.Category(memory.Activation).Peak, 0},
					{"host requested", hs.Requested.Current, params + wantState},
				} {
					if c.got != c.want {
						t.Errorf("%s: %d bytes, want %d", c.what, c.got, c.want)
					}
				}
			})
		}
	}
}

// TestOffloadBoth: activations and optimizer state offloaded together
// to one host give the plain run's results.
func TestOffloadBoth(t *testing.T) {
	dev := cpu.New()
	m := newGPT(t, dev, 2, 0.1)
	defer m.release()
	opt, _ := optim.New("adamw", m.m.Parameters(), optim.Settings{LR: 1e-2})
	wantLoss, wantParams := trainSteps(t, m, 2, opt.Step, opt.ZeroGrad)
	opt.Release()

	dev2, host := cpu.New(), cpu.New()
	m2 := newGPT(t, dev2, 2, 0.1)
	defer m2.release()
	off, _ := offload.NewOptimizer(host, m2.m.Parameters())
	defer off.Release()
	hopt, _ := optim.New("adamw", off.Masters(), optim.Settings{LR: 1e-2})
	defer hopt.Release()
	acts, _ := offload.NewActivations(host, 1)
	m2.m.(interface{ SetBlockRunner(nn.BlockRunner) }).SetBlockRunner(acts.Runner(nil))
	var gotLoss []uint64
	for range 2 {
		err := tensor.Step(func(s *tensor.Scope) error {
			logits := m2.m.Forward(nn.NewRun(s, 7), m2.in)
			l := s.CrossEntropy(s.Reshape(logits, -1, m2.classes), m2.tgt, tensor.CrossEntropyOptions{})
			gotLoss = append(gotLoss, math.Float64bits(l.Item()))
			l.Backward()
			return off.Step(hopt.Step)
		}, tensor.SaveHooks(acts))
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(gotLoss, wantLoss) {
		t.Errorf("losses differ: %v, want %v", gotLoss, wantLoss)
	}
	for i, p := range m2.m.Parameters() {
		var bits []uint32
		for _, v := range p.Float32s() {
			bits = append(bits, math.Float32bits(v))
		}
		if !slices.Equal(bits, wantParams[i]) {
			t.Errorf("parameter %s differs", p.Name())
		}
	}
	if acts.Live() != 0 || host.Memory().Stats().Category(memory.Activation).Current != 0 {
		t.Error("activations left on the host")
	}
}

func TestNewOptimizerErrors(t *testing.T) {
	dev := cpu.New()
	p, _ := tensor.FromFloat32(dev, []float32{1}, []int{1}, memory.Parameter)
	p.SetRequiresGrad(true).SetName("w")
	defer p.Release()
	if _, err := offload.NewOptimizer(nil, []*tensor.Tensor{p}); err == nil {
		t.Error("no host: no error")
	}
	if _, err := offload.NewOptimizer(dev, []*tensor.Tensor{p}); err == nil {
		t.Error("host is the parameters' device: no error")
	}
}
