package tensor_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// mlp is a minimal multi-layer perceptron built from tensor ops alone.
type mlp struct {
	weights, biases []*tensor.Tensor
}

func newMLP(t testing.TB, dev device.Device, widths ...int) *mlp {
	m := &mlp{}
	for i := 0; i+1 < len(widths); i++ {
		w, err := tensor.Rand(dev, tensor.F32, []int{widths[i+1], widths[i]}, device.Normal, 0, 0.1, uint64(i), memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tensor.New(dev, tensor.F32, []int{widths[i+1]}, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		m.weights = append(m.weights, w.SetRequiresGrad(true))
		m.biases = append(m.biases, b.SetRequiresGrad(true))
	}
	return m
}

func (m *mlp) params() []*tensor.Tensor {
	return append(append([]*tensor.Tensor(nil), m.weights...), m.biases...)
}

func (m *mlp) paramBytes() int64 {
	var n int64
	for _, p := range m.params() {
		n += p.Bytes()
	}
	return n
}

// forward releases each intermediate as soon as the next layer has used
// it, as library layers do.
func (m *mlp) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	h := x
	for i := range m.weights {
		y := s.Linear(h, m.weights[i], m.biases[i])
		if h != x {
			h.Release()
		}
		if i == len(m.weights)-1 {
			return y
		}
		h = s.Relu(y)
		y.Release()
	}
	return h
}

func batch(t testing.TB, dev device.Device, n, d, classes int) (*tensor.Tensor, *tensor.Tensor) {
	x, err := tensor.Rand(dev, tensor.F32, []int{n, d}, device.Uniform, -1, 1, 99, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	labels := make([]int32, n)
	for i := range labels {
		labels[i] = int32(i % classes)
	}
	y, err := tensor.FromInt32(dev, labels, []int{n}, memory.Data)
	if err != nil {
		t.Fatal(err)
	}
	return x, y
}

func TestStepLeavesParametersAndGradients(t *testing.T) {
	dev := cpu.New()
	m := newMLP(t, dev, 20, 32, 32, 5)
	x, y := batch(t, dev, 16, 20, 5)
	defer x.Release()
	defer y.Release()
	mem := dev.Memory()
	pb := m.paramBytes()
	inputs := x.Bytes() + y.Bytes()

	var steady int64
	for step := 0; step < 100; step++ {
		s := tensor.NewScope()
		loss := s.CrossEntropy(m.forward(s, x), y, tensor.CrossEntropyOptions{})
		loss.Backward()
		s.Close()
		st := mem.Stats()
		if got, want := st.Requested.Current, 2*pb+inputs; got != want {
			t.Fatalf("step %d: %d bytes allocated, want parameters+gradients+inputs = %d", step, got, want)
		}
		if got := st.Category(memory.Gradient).Current; got != pb {
			t.Fatalf("step %d: gradient bytes %d, want %d", step, got, pb)
		}
		if got := st.Category(memory.Activation).Current + st.Category(memory.Temporary).Current; got != 0 {
			t.Fatalf("step %d: %d activation/temporary bytes survive the step", step, got)
		}
		if step == 0 {
			steady = st.Allocated.Current
		} else if st.Allocated.Current != steady {
			t.Fatalf("step %d: allocated %d, first step %d: memory grows", step, st.Allocated.Current, steady)
		}
	}
	for _, p := range m.params() {
		p.Release()
	}
	if got := mem.Stats().Requested.Current; got != inputs {
		t.Errorf("after releasing the model %d bytes remain, want %d", got, inputs)
	}
}

func TestNoGradForwardKeepsNoGraph(t *testing.T) {
	const depth, width, rows = 50, 64, 32
	widths := make([]int, depth+1)
	for i := range widths {
		widths[i] = width
	}
	dev := cpu.New()
	m := newMLP(t, dev, widths...)
	x, _ := batch(t, dev, rows, width, 2)
	act := int64(rows * width * 4)
	mem := dev.Memory()

	peak := func(opts ...tensor.ScopeOption) int64 {
		mem.ResetPeak()
		s := tensor.NewScope(opts...)
		out := m.forward(s, x)
		out.Release()
		s.Close()
		return mem.Stats().Category(memory.Activation).Peak
	}
	if p := peak(tensor.NoGrad()); p > 3*act {
		t.Errorf("no-grad forward peaked at %d activation bytes = %.1f layers, want <= 3", p, float64(p)/float64(act))
	}
	if p := peak(); p < depth*act {
		t.Errorf("recording forward peaked at %d bytes = %.1f layers, want >= %d (saved for backward)", p, float64(p)/float64(act), depth)
	}
	if got := mem.Stats().Category(memory.Activation).Current; got != 0 {
		t.Errorf("%d activation bytes left after releasing the output", got)
	}
}

func TestReleasingOutputFreesGraph(t *testing.T) {
	dev := cpu.New()
	m := newMLP(t, dev, 8, 16, 4)
	x, y := batch(t, dev, 4, 8, 4)
	s := tensor.NewScope()
	loss := s.CrossEntropy(m.forward(s, x), y, tensor.CrossEntropyOptions{})
	if dev.Memory().Stats().Category(memory.Activation).Current == 0 {
		t.Fatal("no activations saved while recording")
	}
	_ = loss
	s.Close() // no backward: the graph must go with its last tensor
	if got := dev.Memory().Stats().Category(memory.Activation).Current; got != 0 {
		t.Errorf("%d activation bytes kept by a graph nobody can reach", got)
	}
}

func TestLeakReportNamesCreationSite(t *testing.T) {
	tensor.TrackLeaks(true)
	defer tensor.TrackLeaks(false)
	dev := cpu.New()
	_, file, line, _ := runtime.Caller(0)
	leaked, err := tensor.New(dev, tensor.F32, []int{3, 7}, memory.Activation) // the leak
	if err != nil {
		t.Fatal(err)
	}
	fine, _ := tensor.New(dev, tensor.F32, []int{2}, memory.Activation)
	fine.Release()
	report := tensor.LeakReport()
	want := fmt.Sprintf("%s:%d", file, line+1)
	if !strings.Contains(report, want) {
		t.Errorf("leak report does not name %s:\n%s", want, report)
	}
	if live := tensor.LiveTensors(); len(live) != 1 || live[0].Bytes != 84 {
		t.Errorf("live tensors %+v, want the one 3x7 f32", live)
	}
	leaked.Release()
	if live := tensor.LiveTensors(); len(live) != 0 {
		t.Errorf("still live after release: %+v", live)
	}
}

func TestBackwardTwiceIsAnError(t *testing.T) {
	dev := cpu.New()
	w, _ := tensor.Rand(dev, tensor.F32, []int{3}, device.Normal, 0, 1, 1, memory.Parameter)
	w.SetRequiresGrad(true)
	err := tensor.Step(func(s *tensor.Scope) error {
		loss := s.Sum(s.Mul(w, w), false)
		loss.Backward()
		loss.Backward()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "second time") {
		t.Errorf("second backward gave %v, want an error about backward twice", err)
	}
	err = tensor.Step(func(s *tensor.Scope) error {
		loss := s.Sum(s.Mul(w, w), false)
		loss.Backward(tensor.RetainGraph())
		loss.Backward()
		return nil
	})
	if err != nil {
		t.Errorf("backward twice with RetainGraph: %v", err)
	}
}

func TestStepReturnsShapeAndOOMErrors(t *testing.T) {
	dev := cpu.New(cpu.Capacity(4 << 20))
	a, _ := tensor.New(dev, tensor.F32, []int{2, 3}, memory.Activation)
	b, _ := tensor.New(dev, tensor.F32, []int{4, 5}, memory.Activation)
	defer a.Release()
	defer b.Release()
	err := tensor.Step(func(s *tensor.Scope) error {
		s.MatMul(a, b)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "inner dimensions differ") {
		t.Errorf("bad matmul gave %v", err)
	}
	err = tensor.Step(func(s *tensor.Scope) error {
		big, _ := tensor.New(dev, tensor.F32, []int{1024, 512}, memory.Activation)
		defer big.Release()
		s.Add(big, big) // 2 MiB more than fits beside the 2 MiB small-pool segment
		return nil
	})
	if !tensor.IsOOM(err) {
		t.Errorf("over capacity gave %v, want an OOM error", err)
	}
	if got := dev.Memory().Stats().Requested.Current; got != a.Bytes()+b.Bytes() {
		t.Errorf("after the failed steps %d bytes allocated, want %d", got, a.Bytes()+b.Bytes())
	}
}

func TestInPlaceAfterSaveIsAnError(t *testing.T) {
	dev := cpu.New()
	w, _ := tensor.Rand(dev, tensor.F32, []int{4}, device.Normal, 0, 1, 3, memory.Parameter)
	w.SetRequiresGrad(true)
	defer w.Release()
	err := tensor.Step(func(s *tensor.Scope) error {
		x := s.MulScalar(w, 1)
		y := s.Mul(x, x) // saves x
		s.ReluInPlace(x) // overwrites it
		s.Sum(y, false).Backward()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "mul") || !strings.Contains(err.Error(), "in-place") {
		t.Errorf("backward through an overwritten saved tensor gave %v, want an error naming mul and the in-place write", err)
	}
	err = tensor.Step(func(s *tensor.Scope) error {
		s.ReluInPlace(w)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "leaf") {
		t.Errorf("in-place on a parameter gave %v", err)
	}
}

func TestInPlaceReluSavesAnActivation(t *testing.T) {
	dev := cpu.New()
	w, _ := tensor.Rand(dev, tensor.F32, []int{64, 64}, device.Normal, 0, 0.1, 3, memory.Parameter)
	w.SetRequiresGrad(true)
	defer w.Release()
	x, _ := batch(t, dev, 32, 64, 2)
	defer x.Release()
	peak := func(inPlace bool) int64 {
		dev.Memory().ResetPeak()
		s := tensor.NewScope()
		defer s.Close()
		h := x
		for range 8 {
			y := s.Linear(h, w, nil)
			if inPlace {
				h = s.ReluInPlace(y)
			} else {
				h = s.Relu(y)
			}
		}
		s.Sum(h, false).Backward()
		return dev.Memory().Stats().Category(memory.Activation).Peak
	}
	act := int64(32 * 64 * 4)
	out, in := peak(false), peak(true)
	if out-in < 7*act {
		t.Errorf("in-place relu peak %d vs %d out of place: saves %d bytes, want >= %d (one activation per layer)", in, out, out-in, 7*act)
	}
}

// TestOnGradReady: the hook runs once per backward pass per leaf, when
// the leaf's gradient is complete (a weight used three times, once
// through a long chain), and may take the gradient away.
func TestOnGradReady(t *testing.T) {
	dev := cpu.New()
	w, _ := tensor.FromFloat32(dev, []float32{1, 2, 3}, []int{3}, memory.Parameter)
	u, _ := tensor.FromFloat32(dev, []float32{4, 5, 6}, []int{3}, memory.Parameter)
	unused, _ := tensor.FromFloat32(dev, []float32{0}, []int{1}, memory.Parameter)
	defer w.Release()
	defer u.Release()
	defer unused.Release()
	var calls []string
	var atReady []float32
	w.SetName("w").SetRequiresGrad(true).OnGradReady(func(l *tensor.Tensor) {
		calls = append(calls, l.Name())
		atReady = l.Grad().Float32s()
	})
	u.SetName("u").SetRequiresGrad(true).OnGradReady(func(l *tensor.Tensor) {
		calls = append(calls, l.Name())
		l.SetGrad(nil) // taken: no later node may write it
	})
	unused.SetRequiresGrad(true).OnGradReady(func(*tensor.Tensor) { calls = append(calls, "unused") })
	err := tensor.Step(func(s *tensor.Scope) error {
		// L = Σ (w·u) + Σ w² + Σ exp(tanh(w))·2
		a := s.Sum(s.Mul(w, u), false)
		b := s.Sum(s.Square(w), false)
		c := s.Sum(s.MulScalar(s.Exp(s.Tanh(w)), 2), false)
		s.Add(s.Add(a, b), c).Backward()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || u.Grad() != nil {
		t.Fatalf("hook calls %v (want w and u once each); u's gradient after its hook released it: %v", calls, u.Grad())
	}
	final := w.Grad().Float32s()
	for i := range final {
		if atReady[i] != final[i] {
			t.Errorf("w's gradient at the hook %v, after backward %v: the hook ran before the last contribution", atReady, final)
			break
		}
	}
}
