package nn_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// hidden is a stack of Linear → Dropout → ReLU layers and a linear head.
func hidden(t *testing.T, b *nn.Builder, widths ...int) *nn.Sequential {
	var layers []nn.Module
	for i := 0; i+1 < len(widths); i++ {
		l, err := nn.NewLinear(b, nn.Join("layers", string(rune('0'+i))), nn.LinearConfig{In: widths[i], Out: widths[i+1], Weight: nn.KaimingUniform(nn.ReLUGain)})
		if err != nil {
			t.Fatal(err)
		}
		if i+2 == len(widths) {
			layers = append(layers, l)
			break
		}
		d, _ := nn.NewDropout(l.Weight.Name(), 0.2)
		layers = append(layers, &nn.Fused{Layer: l, Then: []nn.Pointwise{d, nn.ReLU{}}})
	}
	return nn.NewSequential(layers...)
}

// Run.InPlace changes neither the loss nor a single bit of any gradient,
// and lowers the activation peak: the dropout and the ReLU write into the
// linear layer's output instead of making two new activations.
func TestInPlaceSavesActivations(t *testing.T) {
	const batch, width = 64, 256
	dev := cpu.New()
	b := &nn.Builder{Dev: dev, Seed: 1}
	m := hidden(t, b, 32, width, width, width, 10)
	defer nn.Release(m)
	x, _ := tensor.Rand(dev, tensor.F32, []int{batch, 32}, device.Normal, 0, 1, 3, memory.Data)
	y, _ := tensor.Rand(dev, tensor.F32, []int{batch, 10}, device.Normal, 0, 1, 4, memory.Data)
	defer x.Release()
	defer y.Release()
	mem := dev.Memory()

	step := func(inPlace bool) (loss float64, grads [][]float32, peak int64) {
		mem.ResetPeak()
		s := tensor.NewScope()
		r := nn.NewRun(s, 5)
		r.InPlace = inPlace
		l := nn.MSE(s, m.Forward(r, x), y, nn.MeanReduction)
		peak = mem.Stats().Category(memory.Activation).Peak
		l.Backward()
		loss = l.Item()
		s.Close()
		for _, p := range m.Parameters() {
			grads = append(grads, p.Grad().Float32s())
			p.SetGrad(nil)
		}
		if n := mem.Stats().Category(memory.Activation).Current; n != 0 {
			t.Fatalf("in-place=%v: %d activation bytes survive the step", inPlace, n)
		}
		return loss, grads, peak
	}
	lossOff, gradsOff, peakOff := step(false)
	lossOn, gradsOn, peakOn := step(true)
	if lossOn != lossOff {
		t.Errorf("loss %v in place, %v not", lossOn, lossOff)
	}
	for i := range gradsOn {
		if !slices.Equal(gradsOn[i], gradsOff[i]) {
			t.Errorf("gradient %d differs with in-place ops", i)
		}
	}
	// Both keep one activation per hidden layer for backward (the ReLU
	// output); out of place, the layer being computed holds a second one
	// at the peak, which in place never exists. The in-place peak comes
	// later, at the small head and loss.
	const layers = 3
	act := int64(batch * width * 4) // one hidden activation
	t.Logf("activation peak: %d bytes out of place, %d in place: %d saved (%.2f hidden activations of %d bytes)",
		peakOff, peakOn, peakOff-peakOn, float64(peakOff-peakOn)/float64(act), act)
	if peakOff != (layers+1)*act {
		t.Errorf("out-of-place peak %d, want %d hidden activations (%d)", peakOff, layers+1, (layers+1)*act)
	}
	if peakOn >= layers*act+act/4 {
		t.Errorf("in-place peak %d, want about %d hidden activations (%d) plus the head's", peakOn, layers, layers*act)
	}
}

// A layer misused so that it writes over a tensor another op saved makes
// backward fail with an error naming that op — never a wrong gradient.
func TestInPlaceMisuseFailsLoudly(t *testing.T) {
	dev := cpu.New()
	b := &nn.Builder{Dev: dev, Seed: 1}
	defer b.Abort()
	fc, _ := nn.NewLinear(b, "fc", nn.LinearConfig{In: 4, Out: 4})
	ln, _ := nn.NewLayerNorm(b, "ln", 4)
	x, _ := tensor.Rand(dev, tensor.F32, []int{3, 4}, device.Normal, 0, 1, 3, memory.Data)
	defer x.Release()

	cases := []struct {
		name    string
		forward func(r *nn.Run) *tensor.Tensor
		op      string
	}{
		{"residual into a ReLU output", func(r *nn.Run) *tensor.Tensor {
			// relu_ saved its output; Residual overwrites it.
			h := (&nn.Fused{Layer: fc, Then: []nn.Pointwise{nn.ReLU{}}}).Forward(r, x)
			return nn.Residual(r, h, x)
		}, "relu_"},
		{"scaling a LayerNorm input after the fact", func(r *nn.Run) *tensor.Tensor {
			h := fc.Forward(r, x)
			y := ln.Forward(r, h)
			r.MulScalarInPlace(h, 2) // layer_norm saved h
			return y
		}, "layer_norm"},
		{"ReLU over a Tanh output", func(r *nn.Run) *tensor.Tensor {
			h := nn.Tanh{}.Forward(r, fc.Forward(r, x))
			return r.ReluInPlace(h) // tanh saved h
		}, "tanh"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tempBefore := dev.Memory().Stats().Category(memory.Temporary).Current
			err := tensor.Step(func(s *tensor.Scope) error {
				out := c.forward(nn.NewRun(s, 1))
				s.Sum(out, false).Backward()
				return nil
			})
			if err == nil {
				t.Fatal("backward succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, c.op+":") || !strings.Contains(msg, "modified by an in-place operation") {
				t.Errorf("error %q does not name %s and the in-place write", msg, c.op)
			}
			for _, p := range append(fc.Parameters(), ln.Parameters()...) {
				p.SetGrad(nil)
			}
			// tensor.(*Tensor).Backward drops the gradient flowing into
			// the node that fails its version check without releasing it
			// (reported to the tensor owner); until that is fixed the
			// failed step leaves those Temporary bytes behind.
			st := dev.Memory().Stats()
			if n := st.Category(memory.Activation).Current; n != 0 {
				t.Errorf("%d activation bytes leaked by the failed step", n)
			}
			if n := st.Category(memory.Temporary).Current - tempBefore; n != 0 {
				t.Logf("known tensor issue: %d temporary bytes (the failing node's incoming gradient) leaked by the failed backward", n)
			}
		})
	}
}
