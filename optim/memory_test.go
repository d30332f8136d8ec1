package optim_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// mlp is a two-layer perceptron made of tensor ops.
type mlp struct {
	w1, b1, w2, b2 *tensor.Tensor
	x, y           *tensor.Tensor // one batch, kept by the test
}

func newMLP(t testing.TB, dev device.Device, in, hidden, out, batch int, seed uint64) *mlp {
	t.Helper()
	rnd := func(name string, cat memory.Category, shape ...int) *tensor.Tensor {
		r, err := tensor.Rand(dev, tensor.F32, shape, device.Normal, 0, 0.5, seed, cat)
		if err != nil {
			t.Fatal(err)
		}
		seed++
		if cat == memory.Parameter {
			r.SetRequiresGrad(true).SetName(name)
		}
		return r
	}
	return &mlp{
		w1: rnd("fc1.weight", memory.Parameter, hidden, in),
		b1: rnd("fc1.bias", memory.Parameter, hidden),
		w2: rnd("fc2.weight", memory.Parameter, out, hidden),
		b2: rnd("fc2.bias", memory.Parameter, out),
		x:  rnd("", memory.Data, batch, in),
		y:  rnd("", memory.Data, batch, out),
	}
}

func (m *mlp) params() []*tensor.Tensor { return []*tensor.Tensor{m.w1, m.b1, m.w2, m.b2} }

func (m *mlp) count() int64 {
	var n int64
	for _, p := range m.params() {
		n += int64(p.Len())
	}
	return n
}

// backward runs forward and backward on the batch, leaving gradients.
func (m *mlp) backward(t testing.TB) float64 {
	t.Helper()
	var loss float64
	err := tensor.Step(func(s *tensor.Scope) error {
		h := s.Relu(s.Linear(m.x, m.w1, m.b1))
		l := s.MSE(s.Linear(h, m.w2, m.b2), m.y)
		loss = l.Item()
		l.Backward()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

// After a training step with Adam the allocator holds exactly parameters,
// gradients, optimizer state (8 bytes per parameter element) and the batch
// the test keeps; after ZeroGrad the gradients are gone.
func TestMemoryAfterAdamStep(t *testing.T) {
	devices := map[string]func() device.Device{
		"cpu":  func() device.Device { return cpu.New() },
		"meta": func() device.Device { return meta.New(0) },
	}
	for name, mk := range devices {
		t.Run(name, func(t *testing.T) {
			dev := mk()
			m := newMLP(t, dev, 12, 32, 5, 8, 1)
			P := m.count()
			data := m.x.Bytes() + m.y.Bytes()
			opt, err := optim.NewAdamW(m.params(), optim.AdamW{LR: 1e-3, WeightDecay: 0.1})
			if err != nil {
				t.Fatal(err)
			}
			if n := category(dev, memory.OptimizerState); n != 0 {
				t.Fatalf("state before the first step: %d bytes, want 0 (lazy)", n)
			}
			for step := range 3 {
				m.backward(t)
				if err := opt.Step(); err != nil {
					t.Fatal(err)
				}
				st := dev.Memory().Stats()
				want := map[memory.Category]int64{
					memory.Parameter:      4 * P,
					memory.Gradient:       4 * P,
					memory.OptimizerState: 8 * P,
					memory.Activation:     0,
					memory.Temporary:      0,
					memory.Data:           data,
				}
				for c, w := range want {
					if got := st.Category(c).Current; got != w {
						t.Errorf("step %d: %v = %d bytes, want %d", step, c, got, w)
					}
				}
				if got, w := st.Requested.Current, 16*P+data; got != w {
					t.Errorf("step %d: %d bytes requested in all, want params+grads+state+data = %d", step, got, w)
				}
				if got := opt.StateBytes(); got != 8*P {
					t.Errorf("StateBytes() = %d, want %d", got, 8*P)
				}
				opt.ZeroGrad()
				if got := category(dev, memory.Gradient); got != 0 {
					t.Errorf("step %d: %d gradient bytes after ZeroGrad, want 0", step, got)
				}
			}
			opt.Release()
			if got := category(dev, memory.OptimizerState); got != 0 {
				t.Errorf("%d state bytes after Release", got)
			}
		})
	}
}

// SGD with momentum keeps one buffer per parameter, plain SGD none.
func TestMemorySGD(t *testing.T) {
	for _, c := range []struct {
		momentum float64
		perElem  int64
	}{{0, 0}, {0.9, 4}} {
		dev := cpu.New()
		m := newMLP(t, dev, 6, 10, 3, 4, 7)
		opt, err := optim.NewSGD(m.params(), optim.SGD{LR: 0.1, Momentum: c.momentum})
		if err != nil {
			t.Fatal(err)
		}
		m.backward(t)
		if err := opt.Step(); err != nil {
			t.Fatal(err)
		}
		if got, want := category(dev, memory.OptimizerState), c.perElem*m.count(); got != want {
			t.Errorf("momentum %v: %d state bytes, want %d", c.momentum, got, want)
		}
		if got := category(dev, memory.Temporary); got != 0 {
			t.Errorf("momentum %v: %d temporary bytes after Step", c.momentum, got)
		}
	}
}

// Frozen parameters (no gradient) are skipped and never get state;
// DropState frees a parameter's state; AddParams trains more at their own
// rate, with state created at their first step.
func TestFreezeDropAndUnfreeze(t *testing.T) {
	dev := cpu.New()
	m := newMLP(t, dev, 6, 10, 3, 4, 3)
	m.w1.SetRequiresGrad(false)
	m.b1.SetRequiresGrad(false)
	opt, err := optim.NewAdam(m.params(), optim.Adam{LR: 1e-2})
	if err != nil {
		t.Fatal(err)
	}
	w1 := m.w1.Float64s()
	m.backward(t)
	if m.w1.Grad() != nil {
		t.Fatal("a frozen parameter received a gradient")
	}
	if err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	trainable := int64(m.w2.Len() + m.b2.Len())
	if got := category(dev, memory.OptimizerState); got != 8*trainable {
		t.Errorf("state %d bytes, want %d (trainable parameters only)", got, 8*trainable)
	}
	if opt.HasState(m.w1) || opt.HasState(m.b1) {
		t.Error("frozen parameters got state")
	}
	assertClose(t, "frozen fc1.weight", m.w1.Float64s(), w1, 0)

	// Freeze fc2.bias: its state goes.
	m.b2.SetRequiresGrad(false)
	m.b2.SetGrad(nil)
	opt.DropState(m.b2)
	if got, want := category(dev, memory.OptimizerState), int64(8*m.w2.Len()); got != want {
		t.Errorf("after DropState: %d state bytes, want %d", got, want)
	}

	// Unfreeze fc1 at its own learning rate (fc1 is already held: it moves).
	opt.ZeroGrad()
	m.w1.SetRequiresGrad(true)
	m.b1.SetRequiresGrad(true)
	if err := opt.AddParams(1e-4, m.w1, m.b1); err != nil {
		t.Fatal(err)
	}
	groups := opt.Groups()
	if len(groups) != 2 || len(groups[0].Params) != 2 || len(groups[1].Params) != 2 || groups[1].LR != 1e-4 {
		t.Fatalf("groups after AddParams: %+v", groups)
	}
	if len(opt.Params()) != 4 {
		t.Fatalf("Params() has %d entries, want 4", len(opt.Params()))
	}
	m.backward(t)
	if err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	want := int64(8 * (m.w1.Len() + m.b1.Len() + m.w2.Len()))
	if got := category(dev, memory.OptimizerState); got != want {
		t.Errorf("after unfreezing: %d state bytes, want %d", got, want)
	}
	if got := category(dev, memory.Temporary); got != 0 {
		t.Errorf("%d temporary bytes after Step", got)
	}
}

// Each group uses its own learning rate and weight decay.
func TestGroups(t *testing.T) {
	dev := cpu.New()
	a := param(t, dev, "a", p0)
	b := param(t, dev, "b", p0)
	c := param(t, dev, "c", p0)
	opt, err := optim.NewSGD([]*tensor.Tensor{a}, optim.SGD{LR: 0.1, WeightDecay: 0.5},
		optim.Group{Params: []*tensor.Tensor{b}, LR: 0.01},
		optim.Group{Params: []*tensor.Tensor{c}, LR: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*tensor.Tensor{a, b, c} {
		setGrad(t, p, grads[0])
	}
	if err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	g := [][]float64{f64To32(grads[0])}
	assertClose(t, "a", a.Float64s(), sgdRef(f64(p0), g, 0.1, 0, 0, 0.5, false), 1e-6)
	assertClose(t, "b", b.Float64s(), sgdRef(f64(p0), g, 0.01, 0, 0, 0, false), 1e-6)
	assertClose(t, "c", c.Float64s(), f64(p0), 0)

	if err := opt.SetLR(2, 1); err != nil {
		t.Fatal(err)
	}
	if opt.LR(2) != 1 {
		t.Errorf("LR(2) = %v after SetLR", opt.LR(2))
	}
	if err := opt.SetLR(3, 1); err == nil {
		t.Error("SetLR of a missing group gave no error")
	}
	if _, err := optim.NewSGD([]*tensor.Tensor{a}, optim.SGD{LR: 0.1}, optim.Group{Params: []*tensor.Tensor{a}, LR: 1}); err == nil {
		t.Error("a parameter in two groups gave no error")
	}
}

func f64To32(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(float32(x))
	}
	return out
}

// ZeroGradInPlace keeps the gradient buffers and zeroes them.
func TestZeroGradInPlace(t *testing.T) {
	dev := cpu.New()
	m := newMLP(t, dev, 6, 10, 3, 4, 5)
	opt, err := optim.NewSGD(m.params(), optim.SGD{LR: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	m.backward(t)
	g := m.w1.Grad()
	before := category(dev, memory.Gradient)
	if err := opt.ZeroGradInPlace(); err != nil {
		t.Fatal(err)
	}
	if m.w1.Grad() != g {
		t.Error("ZeroGradInPlace replaced the gradient tensor")
	}
	for _, p := range m.params() {
		for i, v := range p.Grad().Float64s() {
			if v != 0 {
				t.Fatalf("%s grad[%d] = %v after ZeroGradInPlace", p.Name(), i, v)
			}
		}
	}
	if got := category(dev, memory.Gradient); got != before {
		t.Errorf("gradient bytes %d -> %d", before, got)
	}
	if got := category(dev, memory.Temporary); got != 0 {
		t.Errorf("%d temporary bytes left", got)
	}
	// Gradients accumulate onto the zeroed buffers as onto fresh ones.
	m.backward(t)
	once := m.w1.Grad().Float64s()
	opt.ZeroGrad()
	m.backward(t)
	assertClose(t, "gradient after in-place zeroing", once, m.w1.Grad().Float64s(), 0)
}

// The interfaces through which amp and freeze use an optimizer, restated
// here so that optim's tests do not import its peers.
var (
	_ interface {
		Params() []*tensor.Tensor
		Step() error
	} = (*optim.Optimizer)(nil) // amp.Optimizer
	_ interface {
		DropState(params ...*tensor.Tensor)
	} = (*optim.Optimizer)(nil) // freeze.StateDropper
	_ interface {
		AddParams(float64, ...*tensor.Tensor) error
	} = (*optim.Optimizer)(nil) // freeze.Adder
)
