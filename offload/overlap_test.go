package offload_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/offload"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// makeOpt builds an optimizer by name over params; "sgd" has momentum,
// so that it keeps state.
func makeOpt(t testing.TB, name string, params []*tensor.Tensor) *optim.Optimizer {
	t.Helper()
	var (
		o   *optim.Optimizer
		err error
	)
	if name == "sgd" {
		o, err = optim.NewSGD(params, optim.SGD{LR: 1e-2, Momentum: 0.9, WeightDecay: 0.1})
	} else {
		o, err = optim.New(name, params, optim.Settings{LR: 1e-2, WeightDecay: 0.1})
	}
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func paramBits(ps []*tensor.Tensor) [][]uint32 {
	var out [][]uint32
	for _, p := range ps {
		var bits []uint32
		for _, v := range p.Float32s() {
			bits = append(bits, math.Float32bits(v))
		}
		out = append(out, bits)
	}
	return out
}

func sameBits(t *testing.T, what string, got, want [][]uint32, ps []*tensor.Tensor) {
	t.Helper()
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%s: %s differs", what, ps[i].Name())
		}
	}
}

// leftOver fails when either allocator holds more than the model states
// between steps: the device its parameters and data, the host the
// masters and the optimizer's state.
func leftOver(t *testing.T, step int, dev, host device.Device, hostState int64) {
	t.Helper()
	ds, hs := dev.Memory().Stats(), host.Memory().Stats()
	for _, c := range []memory.Category{memory.Gradient, memory.Activation, memory.Temporary, memory.OptimizerState} {
		if n := ds.Category(c).Current; n != 0 {
			t.Errorf("step %d: %d %s bytes left on the device", step, n, c)
		}
	}
	if want := ds.Category(memory.Parameter).Current + hostState; hs.Requested.Current != want {
		t.Errorf("step %d: host holds %d bytes, want masters + state %d (gradients %d, temporaries %d)",
			step, hs.Requested.Current, want, hs.Category(memory.Gradient).Current, hs.Category(memory.Temporary).Current)
	}
}

// TestOverlapBitwise: steps armed before backward and finished after it
// give the losses and weights of the plain optimizer on the device, bit
// for bit, for each optimizer and with checkpointing; from the second
// step every update runs on the host's goroutine during backward (none
// for Adafactor, whose updates allocate: Arm declines it and the step is
// Step's); nothing is left over on either side after any step; the host
// holds the gradients (all of them, reserved at Arm) and the device's
// gradient peak is the first step's, which counts.
func TestOverlapBitwise(t *testing.T) {
	const steps = 4
	for _, b := range builders {
		for _, name := range []string{"adamw", "adam", "sgd", "adam8bit", "adafactor"} {
			for _, pol := range []struct {
				name string
				p    checkpoint.Policy
			}{{"plain", checkpoint.Off}, {"checkpoint", checkpoint.Every}} {
				t.Run(b.name+"/"+name+"/"+pol.name, func(t *testing.T) {
					dev := cpu.New()
					m := b.make(t, dev, 3, 0.1)
					defer m.release()
					m.m.(interface{ SetBlockRunner(nn.BlockRunner) }).SetBlockRunner(pol.p.Runner())
					opt := makeOpt(t, name, m.m.Parameters())
					wantLoss, wantParams := trainSteps(t, m, steps, opt.Step, opt.ZeroGrad)
					wantState := dev.Memory().Stats().Category(memory.OptimizerState).Current
					opt.Release()

					dev2, host := cpu.New(), cpu.New()
					m2 := b.make(t, dev2, 3, 0.1)
					defer m2.release()
					m2.m.(interface{ SetBlockRunner(nn.BlockRunner) }).SetBlockRunner(pol.p.Runner())
					off, err := offload.NewOptimizer(host, m2.m.Parameters())
					if err != nil {
						t.Fatal(err)
					}
					defer off.Release()
					hopt := makeOpt(t, name, off.Masters())
					defer hopt.Release()
					var gotLoss []uint64
					for i := range steps {
						err := tensor.Step(func(s *tensor.Scope) error {
							logits := m2.m.Forward(nn.NewRun(s, 7), m2.in)
							l := s.CrossEntropy(s.Reshape(logits, -1, m2.classes), m2.tgt, tensor.CrossEntropyOptions{})
							gotLoss = append(gotLoss, math.Float64bits(l.Item()))
							if err := off.Arm(hopt); err != nil {
								return err
							}
							l.Backward()
							if off.Armed() {
								return off.Finish()
							}
							return off.Step(hopt.Step)
						})
						if err != nil {
							t.Fatal(err)
						}
						leftOver(t, i+1, dev2, host, wantState)
					}
					if !slices.Equal(gotLoss, wantLoss) {
						t.Errorf("losses differ: %v, want %v", gotLoss, wantLoss)
					}
					sameBits(t, "parameter", paramBits(m2.m.Parameters()), wantParams, m2.m.Parameters())
					n := int64(len(off.Params()))
					st := off.OverlapStats()
					want := offload.OverlapStats{Steps: steps, Background: (steps - 1) * n, AtFinish: n}
					if name == "adafactor" {
						want = offload.OverlapStats{}
					}
					if st != want {
						t.Errorf("overlap stats %+v, want %+v", st, want)
					}
					params := dev2.Memory().Stats().Category(memory.Parameter).Current
					if g := host.Memory().Stats().Category(memory.Gradient).Peak; g != params {
						t.Errorf("host gradient peak %d, want the parameters' %d", g, params)
					}
					if g := dev2.Memory().Stats().Category(memory.Gradient).Peak; g != params {
						t.Errorf("device gradient peak %d, want the parameters' %d", g, params)
					}
				})
			}
		}
	}
}

// shared is a model whose weight w is used inside a checkpointed
// segment and again outside it, so that its gradient completes in two
// backward passes (the segment's recomputation, then the outer pass); b
// is used only inside, c only outside.
type shared struct {
	w, b, c, x *tensor.Tensor
}

func newShared(t testing.TB, dev device.Device, n int) shared {
	t.Helper()
	mk := func(name string, shape []int, scale float64, cat memory.Category) *tensor.Tensor {
		size := 1
		for _, d := range shape {
			size *= d
		}
		vs := make([]float32, size)
		for i := range vs {
			vs[i] = float32(scale * math.Sin(float64(i*7+len(name))))
		}
		x, err := tensor.FromFloat32(dev, vs, shape, cat)
		if err != nil {
			t.Fatal(err)
		}
		if cat == memory.Parameter {
			x.SetRequiresGrad(true).SetName(name)
		}
		return x
	}
	s := 1 / math.Sqrt(float64(n))
	return shared{mk("w", []int{n, n}, s, memory.Parameter), mk("b", []int{n}, 0.1, memory.Parameter),
		mk("c", []int{n, n}, s, memory.Parameter), mk("x", []int{4, n}, 1, memory.Data)}
}

func (m shared) params() []*tensor.Tensor { return []*tensor.Tensor{m.w, m.b, m.c} }

func (m shared) release() {
	for _, p := range append(m.params(), m.x) {
		p.Release()
	}
}

// loss records mean((tanh(tanh(x·wᵀ+b)·wᵀ)·cᵀ)²), the inner tanh
// checkpointed.
func (m shared) loss(s *tensor.Scope) *tensor.Tensor {
	r := nn.NewRun(s, 1)
	h := checkpoint.Run(r, func(r *nn.Run, x *tensor.Tensor) *tensor.Tensor {
		y := r.Linear(x, m.w, m.b)
		defer y.Release()
		return r.Tanh(y)
	}, []*tensor.Tensor{m.w, m.b}, m.x)
	u := s.Linear(s.Tanh(s.Linear(h, m.w, nil)), m.c, nil)
	return s.Mean(s.Mul(u, u), false)
}

// TestOverlapTwoPasses: a weight whose gradient completes in two passes
// moves at its second call from the second step on, and the run equals
// the plain one bit for bit.
func TestOverlapTwoPasses(t *testing.T) {
	const steps = 4
	dev := cpu.New()
	m := newShared(t, dev, 16)
	defer m.release()
	opt := makeOpt(t, "adamw", m.params())
	defer opt.Release()
	for range steps {
		if err := tensor.Step(func(s *tensor.Scope) error { m.loss(s).Backward(); return opt.Step() }); err != nil {
			t.Fatal(err)
		}
		opt.ZeroGrad()
	}
	want := paramBits(m.params())

	dev2, host := cpu.New(), cpu.New()
	m2 := newShared(t, dev2, 16)
	defer m2.release()
	off, _ := offload.NewOptimizer(host, m2.params())
	defer off.Release()
	hopt := makeOpt(t, "adamw", off.Masters())
	defer hopt.Release()
	for range steps {
		err := tensor.Step(func(s *tensor.Scope) error {
			if err := off.Arm(hopt); err != nil {
				return err
			}
			m2.loss(s).Backward()
			return off.Finish()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sameBits(t, "parameter", paramBits(m2.params()), want, m2.params())
	if st, want := off.OverlapStats(), (offload.OverlapStats{Steps: steps, Background: 3 * (steps - 1), AtFinish: 3}); st != want {
		t.Errorf("overlap stats %+v, want %+v", st, want)
	}
}

// armedStep runs one armed step of m and returns Finish's error (or the
// step's).
func armedStep(off *offload.Optimizer, opt offload.Stepper, m shared, backwards int) error {
	return tensor.Step(func(s *tensor.Scope) error {
		if err := off.Arm(opt); err != nil {
			return err
		}
		for range backwards {
			m.loss(s).Backward()
		}
		return off.Finish()
	})
}

// failing fails (or panics in) the update of one master.
type failing struct {
	*optim.Optimizer
	at    string
	panic bool
}

func (f *failing) StepParam(p *tensor.Tensor, scale float64) error {
	if p.Name() == f.at {
		if f.panic {
			panic("injected")
		}
		return errors.New("injected failure")
	}
	return f.Optimizer.StepParam(p, scale)
}

// TestOverlapFailures: a step that fails — in the host's goroutine (an
// error, a panic), in backward (the graph changed after the first step),
// out of host memory at Arm or while creating state, or discarded by
// ZeroGrad — returns an error (never panics or hangs), keeps the
// device's parameters as they were, resets the masters to them, and
// leaves no gradient or temporary on either allocator; Torn says whether
// some host state had taken the step. The next step trains again.
func TestOverlapFailures(t *testing.T) {
	const n = 1024 // 4 MiB weights: large-pool blocks, so capacities are exact
	for _, c := range []struct {
		name     string
		capacity int64
		prepare  func(*testing.T, *optim.Optimizer, []*tensor.Tensor) // in place of the counting step
		step     func(*offload.Optimizer, *failing, shared) error
		want     string
		oom      bool // the error is an out-of-memory one
		torn     bool
	}{
		{name: "worker error", step: func(off *offload.Optimizer, f *failing, m shared) error {
			f.at = "w"
			return armedStep(off, f, m, 1)
		}, want: "injected failure", torn: true},
		{name: "worker panic", step: func(off *offload.Optimizer, f *failing, m shared) error {
			f.at, f.panic = "c", true
			return armedStep(off, f, m, 1)
		}, want: "panicked: injected", torn: true},
		{name: "graph changed", step: func(off *offload.Optimizer, f *failing, m shared) error {
			return armedStep(off, f, m, 2) // every gradient completes twice as often as counted
		}, want: "more backward passes", torn: true},
		{name: "discarded", step: func(off *offload.Optimizer, f *failing, m shared) error {
			err := tensor.Step(func(s *tensor.Scope) error {
				if err := off.Arm(f); err != nil {
					return err
				}
				m.loss(s).Backward()
				return nil
			})
			off.ZeroGrad()
			if err == nil {
				err = errors.New("discarded")
			}
			return err
		}, want: "discarded", torn: true},
		// Masters 8 MiB + a 2 MiB small segment (b), AdamW state 16 MiB,
		// gradients 8 MiB: the state and the gradients do not fit together.
		{name: "host full at state creation", capacity: 28 << 20, step: func(off *offload.Optimizer, f *failing, m shared) error {
			return armedStep(off, f, m, 1)
		}, prepare: func(*testing.T, *optim.Optimizer, []*tensor.Tensor) {}, want: "creating adamw state", oom: true},
		{name: "host full at Arm", capacity: 28 << 20, prepare: func(t *testing.T, o *optim.Optimizer, ms []*tensor.Tensor) {
			if err := o.MakeState(ms...); err != nil {
				t.Fatal(err)
			}
		}, step: func(off *offload.Optimizer, f *failing, m shared) error {
			return armedStep(off, f, m, 1)
		}, want: "reserving the host gradient", oom: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			var opts []cpu.Option
			if c.capacity > 0 {
				opts = append(opts, cpu.Capacity(c.capacity))
			}
			host := cpu.New(opts...)
			m := newShared(t, dev, n)
			defer m.release()
			off, err := offload.NewOptimizer(host, m.params())
			if err != nil {
				t.Fatal(err)
			}
			defer off.Release()
			opt := makeOpt(t, "adamw", off.Masters())
			defer opt.Release()
			f := &failing{Optimizer: opt}
			if c.prepare != nil {
				c.prepare(t, opt, off.Masters())
			} else if err := armedStep(off, f, m, 1); err != nil { // the counting step
				t.Fatal(err)
			}
			before := paramBits(m.params())
			err = c.step(off, f, m)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one mentioning %q", err, c.want)
			}
			t.Log(err)
			if tensor.IsOOM(err) != c.oom {
				t.Errorf("out of memory: %v, want %v", tensor.IsOOM(err), c.oom)
			}
			if off.Torn() != c.torn {
				t.Errorf("Torn %v, want %v", off.Torn(), c.torn)
			}
			if off.Armed() {
				t.Error("still armed after a failed step")
			}
			sameBits(t, "parameter after the failed step", paramBits(m.params()), before, m.params())
			// Read on a device of their own: the host may be full.
			scratch := cpu.New()
			var masters []*tensor.Tensor
			for _, mm := range off.Masters() {
				masters = append(masters, mm.CopyStorage(scratch, memory.Temporary))
			}
			sameBits(t, "master after the failed step", paramBits(masters), before, m.params())
			for _, mm := range masters {
				mm.Release()
			}
			leftOver(t, 2, dev, host, opt.StateBytes())

			// The next step trains, now without the failure.
			f.at, f.panic = "", false
			if !c.oom {
				if err := armedStep(off, f, m, 1); err != nil {
					t.Fatal(err)
				}
				if slices.EqualFunc(paramBits(m.params()), before, slices.Equal) {
					t.Error("the step after the failure changed nothing")
				}
				leftOver(t, 3, dev, host, opt.StateBytes())
			}
		})
	}
}

// TestOverlapMisuse: calls out of order are errors, and the step is
// discarded cleanly.
func TestOverlapMisuse(t *testing.T) {
	dev, host := cpu.New(), cpu.New()
	m := newShared(t, dev, 8)
	defer m.release()
	off, _ := offload.NewOptimizer(host, m.params())
	defer off.Release()
	opt := makeOpt(t, "adamw", off.Masters())
	defer opt.Release()
	if err := off.Finish(); err == nil {
		t.Error("Finish without Arm: no error")
	}
	if err := off.Arm(nil); err == nil {
		t.Error("Arm(nil): no error")
	}
	if err := off.Arm(opt); err != nil {
		t.Fatal(err)
	}
	if err := off.Arm(opt); err == nil {
		t.Error("Arm twice: no error")
	}
	if err := off.Pull(); err == nil {
		t.Error("Pull in an armed step: no error")
	}
	if err := off.Step(opt.Step); err == nil {
		t.Error("Step in an armed step: no error")
	}
	if off.Armed() {
		t.Error("Step left the step armed")
	}
	leftOver(t, 0, dev, host, 0)
}

// TestOverlapRelease: releasing the offloader in an armed step waits for
// the host's goroutine, frees everything and unhooks the parameters.
func TestOverlapRelease(t *testing.T) {
	dev, host := cpu.New(), cpu.New()
	m := newShared(t, dev, 8)
	defer m.release()
	off, _ := offload.NewOptimizer(host, m.params())
	opt := makeOpt(t, "adamw", off.Masters())
	defer opt.Release()
	for range 2 {
		err := tensor.Step(func(s *tensor.Scope) error {
			if err := off.Arm(opt); err != nil {
				return err
			}
			m.loss(s).Backward()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !off.Armed() {
			t.Fatal("not armed")
		}
		if off.OverlapStats().Steps == 0 {
			if err := off.Finish(); err != nil {
				t.Fatal(err)
			}
		}
	}
	off.Release()
	opt.Release()
	if n := host.Memory().Stats().Requested.Current; n != 0 {
		t.Errorf("%d bytes left on the host", n)
	}
	// Unhooked: a backward now leaves the gradients where they are.
	if err := tensor.Step(func(s *tensor.Scope) error { m.loss(s).Backward(); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.params() {
		if p.Grad() == nil {
			t.Errorf("%s has no gradient", p.Name())
		}
		p.SetGrad(nil)
	}
}
