package optim_test

import (
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// TestUpdatesInPlace: what package offload relies on to update on a
// goroutine of its own — an update that allocates nothing — holds for
// the fused kernels and not for Adafactor, a composed fallback or
// stochastic rounding; and an update that says so allocates nothing.
func TestUpdatesInPlace(t *testing.T) {
	for _, c := range []struct {
		name string
		dev  device.Device
		make func([]*tensor.Tensor) (*optim.Optimizer, error)
		bf16 bool // the parameter is BF16, rounded stochastically
		want bool
	}{
		{"adam", cpu.New(), func(ps []*tensor.Tensor) (*optim.Optimizer, error) { return optim.NewAdam(ps, optim.Adam{LR: 0.1}) }, false, true},
		{"adamw", cpu.New(), func(ps []*tensor.Tensor) (*optim.Optimizer, error) { return optim.NewAdamW(ps, optim.AdamW{LR: 0.1}) }, false, true},
		{"sgd", cpu.New(), func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewSGD(ps, optim.SGD{LR: 0.1, Momentum: 0.9})
		}, false, true},
		{"adam8bit", cpu.New(), func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdam8bit(ps, optim.Adam8bit{LR: 0.1})
		}, false, true},
		{"adam8bit composed", device.Without(cpu.New(), device.CapAdam8bitStep), func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdam8bit(ps, optim.Adam8bit{LR: 0.1})
		}, false, true},
		{"adafactor", cpu.New(), func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdafactor(ps, optim.Adafactor{LR: 0.1})
		}, false, false},
		{"adam composed", device.Without(cpu.New(), device.CapAdamStep), func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			return optim.NewAdam(ps, optim.Adam{LR: 0.1})
		}, false, false},
		{"sgd bf16 rounded", cpu.New(), func(ps []*tensor.Tensor) (*optim.Optimizer, error) {
			o, err := optim.NewSGD(ps, optim.SGD{LR: 0.1})
			if err == nil {
				o.SetStochasticRounding(1)
			}
			return o, err
		}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			vals := make([]float32, 4096)
			for i := range vals {
				vals[i] = float32(i%5) - 2
			}
			w := param(t, c.dev, "w", vals, 64, 64)
			defer w.Release()
			if c.bf16 {
				w16, err := tensor.FromFloat32(c.dev, vals, []int{64, 64}, memory.Parameter)
				if err != nil {
					t.Fatal(err)
				}
				s := tensor.NewScope(tensor.NoGrad())
				b := s.Keep(s.Cast(w16, tensor.BF16))
				s.Close()
				w16.Release()
				w.Release()
				w = b.SetRequiresGrad(true).SetName("w")
			}
			o, err := c.make([]*tensor.Tensor{w})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Release()
			if got := o.UpdatesInPlace(); got != c.want {
				t.Fatalf("UpdatesInPlace %v, want %v", got, c.want)
			}
			g, err := tensor.Full(c.dev, w.DType(), w.Shape(), 0.25, memory.Gradient)
			if err != nil {
				t.Fatal(err)
			}
			w.SetGrad(g)
			defer w.SetGrad(nil)
			if err := o.MakeState(w); err != nil {
				t.Fatal(err)
			}
			allocs := c.dev.Memory().Stats().Allocs
			if err := o.StepParam(w, 1); err != nil {
				t.Fatal(err)
			}
			o.EndStep()
			if n := c.dev.Memory().Stats().Allocs - allocs; c.want && n != 0 {
				t.Errorf("an update in place allocated %d times", n)
			}
		})
	}
}

// TestMakeState: state for the parameters named, in one piece: none for
// the others, none at all when one does not fit or is not the
// optimizer's.
func TestMakeState(t *testing.T) {
	const elems = 1 << 19 // 2 MiB per tensor: large-pool blocks, so the capacity is exact
	// a and b, their state of one of them, a 2 MiB small segment and a bit:
	// not the state of both.
	dev := cpu.New(cpu.Capacity(4*4*elems + 3<<20))
	vals := make([]float32, elems)
	for i := range vals {
		vals[i] = float32(i%7) - 3
	}
	a, b := param(t, dev, "a", vals), param(t, dev, "b", vals)
	defer a.Release()
	defer b.Release()
	opt, err := optim.NewAdam([]*tensor.Tensor{a, b}, optim.Adam{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Release()
	stranger := param(t, dev, "stranger", []float32{1})
	err = opt.MakeState(a, stranger)
	stranger.Release()
	if err == nil || !strings.Contains(err.Error(), "stranger is not a parameter") || opt.StateBytes() != 0 {
		t.Fatalf("MakeState with a stranger: %v, %d state bytes", err, opt.StateBytes())
	}
	if err := opt.MakeState(a, b); !tensor.IsOOM(err) || opt.StateBytes() != 0 || category(dev, memory.OptimizerState) != 0 {
		t.Fatalf("MakeState beyond the capacity: %v, %d state bytes left", err, opt.StateBytes())
	}
	if err := opt.MakeState(b); err != nil {
		t.Fatal(err)
	}
	if opt.HasState(a) || !opt.HasState(b) || opt.StateBytes() != 2*4*elems {
		t.Errorf("state for a %v, b %v, %d bytes", opt.HasState(a), opt.HasState(b), opt.StateBytes())
	}
	if err := opt.MakeState(b); err != nil || opt.StateBytes() != 2*4*elems {
		t.Errorf("MakeState again: %v, %d bytes", err, opt.StateBytes())
	}
}
