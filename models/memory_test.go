package models_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memfit/memfit/checkpoint"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// modelCase is a model and one batch for it, on any device.
type modelCase struct {
	name  string
	build func(dev device.Device) (nn.Model, error)
	batch func(t testing.TB, dev device.Device) (x, y *tensor.Tensor)
}

// setup builds the case's model and batch on dev, released when the test
// ends.
func (c modelCase) setup(t testing.TB, dev device.Device) (m nn.Model, x, y *tensor.Tensor) {
	t.Helper()
	m, err := c.build(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Release(m) })
	x, y = c.batch(t, dev)
	t.Cleanup(func() { x.Release(); y.Release() })
	return m, x, y
}

var modelCases = []modelCase{
	{
		name: "mlp",
		build: func(dev device.Device) (nn.Model, error) {
			return models.NewMLP(dev, models.MLPConfig{Widths: []int{784, 128, 64, 10}, Dropout: 0.2, Seed: 1})
		},
		batch: func(t testing.TB, dev device.Device) (x, y *tensor.Tensor) {
			return squares(t, dev, rand.New(rand.NewPCG(1, 1)), 32) // flattened by the MLP
		},
	},
	{
		name: "cnn",
		build: func(dev device.Device) (nn.Model, error) {
			return models.NewCNN(dev, models.CNNConfig{Conv1: 6, Conv2: 16, Hidden: 120, Classes: 10, Dropout: 0.1, Seed: 1})
		},
		batch: func(t testing.TB, dev device.Device) (x, y *tensor.Tensor) {
			return squares(t, dev, rand.New(rand.NewPCG(1, 1)), 16)
		},
	},
	{
		name: "gpt",
		build: func(dev device.Device) (nn.Model, error) {
			return models.NewGPT(dev, models.GPTConfig{Layers: 3, Heads: 4, Dim: 64, Context: 32, Vocab: 50, Dropout: 0.1, Seed: 1})
		},
		batch: func(t testing.TB, dev device.Device) (x, y *tensor.Tensor) {
			return cycle(t, dev, rand.New(rand.NewPCG(1, 1)), []int32{1, 7, 3, 49, 12, 30}, 4, 32)
		},
	},
	{
		name: "llama",
		build: func(dev device.Device) (nn.Model, error) {
			return models.NewDecoder(dev, models.DecoderConfig{Layers: 3, Heads: 4, KVHeads: 2, Dim: 64, Context: 32, Vocab: 50, Dropout: 0.1, Seed: 1})
		},
		batch: func(t testing.TB, dev device.Device) (x, y *tensor.Tensor) {
			return cycle(t, dev, rand.New(rand.NewPCG(1, 1)), []int32{1, 7, 3, 49, 12, 30}, 4, 32)
		},
	},
}

func categories(dev device.Device) [memory.NumCategories]memory.Stat {
	return dev.Memory().Stats().ByCategory
}

// After forward and backward the allocator holds, byte for byte, the
// parameters (4·P), their gradients (4·P) and the batch; once the step's
// tensors are released nothing else. Three steps, same bytes each time.
func TestStepAccounting(t *testing.T) {
	for _, c := range modelCases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			m, err := c.build(dev)
			if err != nil {
				t.Fatal(err)
			}
			x, y := c.batch(t, dev)
			p := int64(nn.Count(m))
			data := x.Bytes() + y.Bytes()
			if got := categories(dev)[memory.Parameter].Current; got != 4*p {
				t.Fatalf("parameter bytes %d, want 4·P = %d", got, 4*p)
			}
			var steady int64
			for step := range 3 {
				s := tensor.NewScope()
				logits := m.Forward(nn.NewRun(s, uint64(step)), x)
				loss := nn.CrossEntropy(s, logits, y)
				loss.Backward()
				cat := categories(dev)
				if cat[memory.Parameter].Current != 4*p || cat[memory.Gradient].Current != 4*p {
					t.Fatalf("step %d after backward: parameter %d, gradient %d bytes, want 4·P = %d each", step, cat[memory.Parameter].Current, cat[memory.Gradient].Current, 4*p)
				}
				// Releasing the two tensors the step holds frees
				// everything: the model kept no other handle.
				loss.Release()
				logits.Release()
				cat = categories(dev)
				if a, tmp := cat[memory.Activation].Current, cat[memory.Temporary].Current; a != 0 || tmp != 0 {
					t.Fatalf("step %d: %d activation and %d temporary bytes alive after releasing logits and loss", step, a, tmp)
				}
				s.Close()
				sgd(m, 0.01)
				st := dev.Memory().Stats()
				if got := st.Requested.Current; got != 4*p+data {
					t.Fatalf("step %d: %d bytes allocated after the update, want parameters + batch = %d", step, got, 4*p+data)
				}
				if step == 0 {
					steady = st.Allocated.Current
				} else if st.Allocated.Current != steady {
					t.Fatalf("step %d: %d bytes allocated (rounded), first step %d: memory grows", step, st.Allocated.Current, steady)
				}
			}
			x.Release()
			y.Release()
			nn.Release(m)
			if got := dev.Memory().Stats().Requested.Current; got != 0 {
				t.Errorf("%d bytes left after releasing model and batch", got)
			}
		})
	}
}

// stepStats runs one training step and returns the loss, every gradient
// and the activation peak of the step.
func stepStats(t testing.TB, dev device.Device, m nn.Model, x, y *tensor.Tensor, inPlace bool) (float64, [][]float32, int64) {
	dev.Memory().ResetPeak()
	var loss float64
	err := tensor.Step(func(s *tensor.Scope) error {
		r := nn.NewRun(s, 7)
		r.InPlace = inPlace
		l := nn.CrossEntropy(s, m.Forward(r, x), y)
		l.Backward()
		loss = l.Item()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	peak := dev.Memory().Stats().Category(memory.Activation).Peak
	var grads [][]float32
	for _, p := range m.Parameters() {
		grads = append(grads, p.Grad().Float32s())
		p.SetGrad(nil)
	}
	return loss, grads, peak
}

// Run.InPlace changes no loss and no gradient bit, never raises the
// activation peak of a training step and lowers it where an in-place op
// overwrites a tensor alive at the peak (the ReLUs of the MLP and CNN).
func TestInPlaceSavings(t *testing.T) {
	for _, c := range modelCases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			m, x, y := c.setup(t, dev)
			lossOff, gradsOff, peakOff := stepStats(t, dev, m, x, y, false)
			lossOn, gradsOn, peakOn := stepStats(t, dev, m, x, y, true)
			if lossOn != lossOff {
				t.Errorf("loss %v in place, %v out of place", lossOn, lossOff)
			}
			for i, p := range m.Parameters() {
				if !slices.Equal(gradsOn[i], gradsOff[i]) {
					t.Errorf("gradient of %s differs in place", p.Name())
				}
			}
			t.Logf("activation peak of a training step: %d bytes out of place, %d in place: %d bytes (%.1f%%) saved",
				peakOff, peakOn, peakOff-peakOn, 100*float64(peakOff-peakOn)/float64(peakOff))
			switch {
			case peakOn > peakOff:
				t.Errorf("in-place peak %d is above the out-of-place peak %d", peakOn, peakOff)
			case peakOn == peakOff && c.name != "gpt" && c.name != "llama":
				// The transformers' in-place ops (residual sums, dropout)
				// overwrite tensors that are dead before the activation
				// peak, so they cannot move it; its attention scores are
				// scaled and masked inside one op either way.
				t.Errorf("in-place peak %d is not below the out-of-place peak %d", peakOn, peakOff)
			}
		})
	}
}

// A GPT forward in a NoGrad scope saves nothing: activations return to
// zero once the logits are released, and the peak is that of about one
// block, far below the recording forward's.
func TestGPTNoGrad(t *testing.T) {
	dev := cpu.New()
	m, err := models.NewGPT(dev, models.GPTConfig{Layers: 8, Heads: 4, Dim: 64, Context: 64, Vocab: 64, Dropout: 0.1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer nn.Release(m)
	x, y := cycle(t, dev, rand.New(rand.NewPCG(1, 1)), []int32{1, 2, 3}, 4, 64)
	defer x.Release()
	defer y.Release()
	mem := dev.Memory()

	forward := func(opts ...tensor.ScopeOption) (peak, after int64, logits []float32) {
		mem.ResetPeak()
		s := tensor.NewScope(opts...)
		r := &nn.Run{Scope: s} // eval mode (no dropout); records unless opts say NoGrad
		out := m.Forward(r, x)
		logits = out.Float32s()
		out.Release()
		after = mem.Stats().Category(memory.Activation).Current
		s.Close()
		return mem.Stats().Category(memory.Activation).Peak, after, logits
	}
	recPeak, recAfter, recLogits := forward()
	peak, after, logits := forward(tensor.NoGrad())
	if after != 0 || recAfter != 0 {
		t.Errorf("activation bytes after releasing the logits: %d without grad, %d recording", after, recAfter)
	}
	if !slices.Equal(logits, recLogits) {
		t.Error("NoGrad logits differ from recording logits")
	}
	logitBytes := int64(4 * 64 * 64 * 4)
	t.Logf("activation peak: %d bytes recording, %d in NoGrad (%.1f×), logits %d", recPeak, peak, float64(recPeak)/float64(peak), logitBytes)
	if peak*4 > recPeak {
		t.Errorf("NoGrad peak %d is not far below the recording peak %d", peak, recPeak)
	}
}

// One step traced on the meta device allocates exactly what it allocates
// on the CPU, category by category: how the planner predicts a model's
// memory without running it.
func TestMetaDeviceMatchesCPU(t *testing.T) {
	for _, c := range modelCases {
		t.Run(c.name, func(t *testing.T) {
			var got [2][memory.NumCategories]memory.Stat
			for i, dev := range []device.Device{cpu.New(), device.Without(meta.New(0), device.Lacks("cpu")...)} {
				m, err := c.build(dev)
				if err != nil {
					t.Fatal(err)
				}
				x, y := c.batch(t, dev)
				stepStats(t, dev, m, x, y, true)
				got[i] = categories(dev)
				x.Release()
				y.Release()
				nn.Release(m)
			}
			for cat := range memory.NumCategories {
				if got[0][cat].Peak != got[1][cat].Peak || got[0][cat].Current != got[1][cat].Current {
					t.Errorf("%v: cpu %+v, meta %+v", cat, got[0][cat], got[1][cat])
				}
			}
		})
	}
}

// The models route their blocks through the runner: activation
// checkpointing gives the same loss and gradients, bit for bit (dropout
// masks and in-place ops included), with a lower activation peak.
func TestCheckpointedBlocks(t *testing.T) {
	for _, c := range modelCases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			m, x, y := c.setup(t, dev)
			loss, grads, peak := stepStats(t, dev, m, x, y, true)
			calls := 0
			every := checkpoint.Every.Runner()
			m.SetBlockRunner(func(r *nn.Run, blocks []nn.Module, x *tensor.Tensor) *tensor.Tensor {
				calls++
				return every(r, blocks, x)
			})
			lossCk, gradsCk, peakCk := stepStats(t, dev, m, x, y, true)
			m.SetBlockRunner(nil)
			if calls != 1 {
				t.Fatalf("runner called %d times, want 1", calls)
			}
			if lossCk != loss {
				t.Errorf("loss %v checkpointed, %v plain", lossCk, loss)
			}
			for i, p := range m.Parameters() {
				if !slices.Equal(gradsCk[i], grads[i]) {
					t.Errorf("gradient of %s differs when checkpointed", p.Name())
				}
			}
			t.Logf("activation peak %d plain, %d checkpointing every block", peak, peakCk)
			if c.name == "gpt" && peakCk >= peak {
				t.Errorf("checkpointing did not lower the activation peak (%d, plain %d)", peakCk, peak)
			}
		})
	}
}

// Under autocast (BF16 products) a training step works, in-place ops
// change nothing (a 16-bit branch is never summed into in place with an
// F32 stream), gradients are F32 and nothing outlives the step.
func TestAutocastStep(t *testing.T) {
	for _, c := range modelCases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			m, x, y := c.setup(t, dev)
			var losses [2]float64
			var grads [2][][]float32
			for i, inPlace := range []bool{false, true} {
				err := tensor.Step(func(s *tensor.Scope) error {
					r := nn.NewRun(s, 7)
					r.InPlace = inPlace
					l := nn.CrossEntropy(s, m.Forward(r, x), y)
					l.Backward()
					losses[i] = l.Item()
					return nil
				}, tensor.Autocast(tensor.BF16))
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range m.Parameters() {
					if p.Grad().DType() != tensor.F32 {
						t.Fatalf("%s: gradient is %v", p.Name(), p.Grad().DType())
					}
					grads[i] = append(grads[i], p.Grad().Float32s())
					p.SetGrad(nil)
				}
				st := dev.Memory().Stats()
				if a, tmp := st.Category(memory.Activation).Current, st.Category(memory.Temporary).Current; a != 0 || tmp != 0 {
					t.Fatalf("%d activation and %d temporary bytes outlive the step", a, tmp)
				}
			}
			if losses[0] != losses[1] || math.IsNaN(losses[0]) {
				t.Errorf("autocast losses %v out of place, %v in place", losses[0], losses[1])
			}
			for i, p := range m.Parameters() {
				if !slices.Equal(grads[0][i], grads[1][i]) {
					t.Errorf("%s: autocast gradient differs in place", p.Name())
				}
			}
		})
	}
}
