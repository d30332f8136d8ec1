package nn_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// The output at position t does not change, not even in its last bit, when
// the inputs after t change.
func TestAttentionIsCausal(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			dev := cpu.New()
			b := &nn.Builder{Dev: dev, Seed: 5, DType: dt}
			defer b.Abort()
			a, err := nn.NewCausalSelfAttention(b, "attn", nn.AttentionConfig{Dim: 8, Heads: 2, QKV: nn.Normal(0, 0.5)})
			if err != nil {
				t.Fatal(err)
			}
			const batch, steps, dim = 2, 6, 8
			x, _ := tensor.Rand(dev, dt, []int{batch, steps, dim}, device.Uniform, -1, 1, 1, memory.Data)
			defer x.Release()
			forward := func(x *tensor.Tensor) []float64 {
				s := tensor.NewScope(tensor.NoGrad())
				defer s.Close()
				return a.Forward(nn.Eval(s), x).Float64s()
			}
			base := forward(x)
			for cut := 0; cut < steps-1; cut++ {
				// Change every input at positions after cut.
				v := x.Float64s()
				for bi := 0; bi < batch; bi++ {
					for ti := cut + 1; ti < steps; ti++ {
						for d := 0; d < dim; d++ {
							v[(bi*steps+ti)*dim+d] += 0.5
						}
					}
				}
				x2, _ := tensor.FromFloat64(dev, v, x.Shape(), memory.Data)
				s := tensor.NewScope(tensor.NoGrad())
				x2c := s.Cast(x2, dt)
				got := forward(x2c)
				s.Close()
				x2.Release()
				changed := false
				for bi := 0; bi < batch; bi++ {
					for ti := 0; ti < steps; ti++ {
						for d := 0; d < dim; d++ {
							i := (bi*steps+ti)*dim + d
							if ti <= cut && got[i] != base[i] {
								t.Fatalf("cut %d: output at position %d changed (%v -> %v)", cut, ti, base[i], got[i])
							}
							changed = changed || (ti > cut && got[i] != base[i])
						}
					}
				}
				if !changed {
					t.Fatalf("cut %d: no later output changed either", cut)
				}
			}
		})
	}
}

// A recording forward and a NoGrad one give the same values, with and
// without in-place ops; training-mode dropout draws the same masks for the
// same run seed.
func TestAttentionModesAgree(t *testing.T) {
	dev := cpu.New()
	b := &nn.Builder{Dev: dev, Seed: 5}
	defer b.Abort()
	a, err := nn.NewCausalSelfAttention(b, "attn", nn.AttentionConfig{Dim: 16, Heads: 4, Dropout: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := tensor.Rand(dev, tensor.F32, []int{3, 7, 16}, device.Uniform, -1, 1, 1, memory.Data)
	defer x.Release()
	var want []float32
	for _, grad := range []bool{true, false} {
		for _, inPlace := range []bool{true, false} {
			var opts []tensor.ScopeOption
			if !grad {
				opts = append(opts, tensor.NoGrad())
			}
			s := tensor.NewScope(opts...)
			got := a.Forward(&nn.Run{Scope: s, Train: true, Seed: 9, InPlace: inPlace}, x).Float32s()
			s.Close()
			if want == nil {
				want = got
				continue
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("grad=%v in-place=%v: element %d is %v, want %v", grad, inPlace, i, got[i], want[i])
				}
			}
		}
	}
}
