package nn_test

import (
	"math"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// adaptedPair builds two adapted Linear layers with the same A, B and
// bias: one whose frozen weight QuantizeFrozen stores in dtype, and one
// holding that weight's dequantized values in F32.
func adaptedPair(t *testing.T, dtype tensor.DType) (q, d *nn.Linear) {
	t.Helper()
	dev := cpu.New()
	mk := func() *nn.Linear {
		b := &nn.Builder{Dev: dev, Seed: 5}
		l, err := nn.NewLinear(b, "fc", nn.LinearConfig{In: 192, Out: 80})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.AttachLoRA(nn.LoRAConfig{Rank: 4, Alpha: 8, Seed: 6}); err != nil {
			t.Fatal(err)
		}
		// A non-zero B, so that the adapter adds something.
		bv := make([]float32, 80*4)
		for i := range bv {
			bv[i] = float32(i%9-4) * 0.01
		}
		if err := l.Adapter.B.SetFloat32s(bv); err != nil {
			t.Fatal(err)
		}
		l.Adapter.A.SetRequiresGrad(true)
		l.Adapter.B.SetRequiresGrad(true)
		l.Bias.SetRequiresGrad(false)
		l.Weight.SetRequiresGrad(false)
		return l
	}
	q, d = mk(), mk()
	n, err := nn.QuantizeFrozen(q, dtype, nil)
	if err != nil || n != 1 || q.Weight.DType() != dtype {
		t.Fatalf("QuantizeFrozen: %d layers, %v; weight %v", n, err, q.Weight.DType())
	}
	if err := d.Weight.SetFloat32s(q.Weight.Float32s()); err != nil {
		t.Fatal(err)
	}
	return q, d
}

// TestQuantizedBaseWithLoRA: an adapted layer over a quantized base
// computes, forward and backward, what it computes over the base's
// dequantized values, bit for bit on the CPU, in F32 and under bf16
// autocast; the adapter's A and B get their gradients, the base none.
func TestQuantizedBaseWithLoRA(t *testing.T) {
	for _, dtype := range []tensor.DType{tensor.NF4, tensor.Int8} {
		for _, ac := range []tensor.DType{device.Invalid, tensor.BF16} {
			name := "no autocast"
			if ac != device.Invalid {
				name = "autocast " + ac.String()
			}
			t.Run(dtype.String()+"/"+name, func(t *testing.T) {
				q, d := adaptedPair(t, dtype)
				defer nn.Release(q)
				defer nn.Release(d)
				xv := make([]float32, 3*7*192)
				for i := range xv {
					xv[i] = float32(math.Sin(float64(i) * 0.7))
				}
				run := func(l *nn.Linear) [3][]float32 {
					var out [3][]float32
					x, _ := tensor.FromFloat32(l.Weight.Device(), xv, []int{3, 7, 192}, memory.Data)
					defer x.Release()
					opts := []tensor.ScopeOption{}
					if ac != device.Invalid {
						opts = append(opts, tensor.Autocast(ac))
					}
					err := tensor.Step(func(s *tensor.Scope) error {
						y := l.Forward(&nn.Run{Scope: s, Train: true}, x)
						out[0] = y.Float32s()
						s.Sum(s.Square(y), false).Backward()
						return nil
					}, opts...)
					if err != nil {
						t.Fatal(err)
					}
					if l.Weight.Grad() != nil {
						t.Error("the frozen base has a gradient")
					}
					out[1], out[2] = l.Adapter.A.Grad().Float32s(), l.Adapter.B.Grad().Float32s()
					return out
				}
				got, want := run(q), run(d)
				for k, name := range []string{"y", "dA", "dB"} {
					for i := range want[k] {
						if math.Float32bits(got[k][i]) != math.Float32bits(want[k][i]) {
							t.Fatalf("%s[%d] = %v over the quantized base, %v over its values", name, i, got[k][i], want[k][i])
						}
					}
				}
			})
		}
	}
}

// TestQuantizedBaseExport: the export of an adapted quantized layer is
// its dequantized weight plus the update (as over the F32 values), and
// merging into a quantized weight is refused.
func TestQuantizedBaseExport(t *testing.T) {
	q, d := adaptedPair(t, tensor.NF4)
	defer nn.Release(q)
	defer nn.Release(d)
	got, err := q.MergedWeight()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := d.MergedWeight()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("merged weight[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	if err := q.MergeLoRA(); err == nil || !strings.Contains(err.Error(), "nf4") || q.Adapter.Merged() {
		t.Errorf("MergeLoRA on an NF4 base: %v", err)
	}
	for _, e := range nn.Export(q) {
		if e.Name == "fc.weight" {
			v, err := e.Float32s()
			if err != nil || len(v) != len(want) || v[7] != want[7] {
				t.Errorf("export of fc.weight: %v", err)
			}
		}
	}
}

// TestQuantizeFrozenChoosesLayers: trainable weights and kept paths stay.
func TestQuantizeFrozenChoosesLayers(t *testing.T) {
	b := &nn.Builder{Dev: cpu.New(), Seed: 1}
	seq := &nn.Sequential{}
	for _, p := range []string{"a", "b", "head"} {
		l, err := nn.NewLinear(b, p, nn.LinearConfig{In: 64, Out: 8})
		if err != nil {
			t.Fatal(err)
		}
		seq.Layers = append(seq.Layers, l)
	}
	defer nn.Release(seq)
	seq.Layers[0].(*nn.Linear).Weight.SetRequiresGrad(true)
	seq.Layers[1].(*nn.Linear).Weight.SetRequiresGrad(false)
	seq.Layers[2].(*nn.Linear).Weight.SetRequiresGrad(false)
	n, err := nn.QuantizeFrozen(seq, tensor.Int8, func(path string) bool { return path == "head" })
	if err != nil || n != 1 {
		t.Fatalf("%d converted, %v", n, err)
	}
	for i, want := range []tensor.DType{tensor.F32, tensor.Int8, tensor.F32} {
		if got := seq.Layers[i].(*nn.Linear).Weight.DType(); got != want {
			t.Errorf("layer %d: %v, want %v", i, got, want)
		}
	}
	if _, err := nn.QuantizeFrozen(seq, tensor.BF16, nil); err == nil {
		t.Error("QuantizeFrozen to bf16")
	}
}
