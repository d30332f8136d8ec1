package nn_test

import (
	"math"
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// convertCounter is the CPU device counting the copies that convert
// between dtypes: the cast passes a GPU would launch.
type convertCounter struct {
	*cpu.Device
	converts int
}

func (d *convertCounter) Copy(dst, src device.View) {
	if dst.DType != src.DType {
		d.converts++
	}
	d.Device.Copy(dst, src)
}

// TestRMSNormAutocastWritesItsResultIn16Bits: under bf16 autocast
// RMSNorm's final multiply writes the bf16 result itself and its
// gradient comes back in F32 without a cast either way, bit for bit what
// the multiply in F32 followed by a cast computes (the composition it
// replaced, written out here), for a trainable F32 gain and for a frozen
// gain held in bf16.
func TestRMSNormAutocastWritesItsResultIn16Bits(t *testing.T) {
	const rows, dim = 6, 40
	for _, c := range []struct {
		name   string
		weight tensor.DType
	}{{"f32 gain", tensor.F32}, {"frozen bf16 gain", tensor.BF16}} {
		t.Run(c.name, func(t *testing.T) {
			dev := &convertCounter{Device: cpu.New()}
			mk := func(shape []int, f func(i int) float64) *tensor.Tensor {
				n := 1
				for _, d := range shape {
					n *= d
				}
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(f(i))
				}
				p, err := tensor.FromFloat32(dev, v, shape, memory.Parameter)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			l, err := nn.NewRMSNorm(&nn.Builder{Dev: dev, DType: tensor.F32}, "norm", dim, 1e-5)
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(l)
			w := mk([]int{dim}, func(i int) float64 { return 1 + 0.3*math.Sin(float64(i)) })
			if c.weight != tensor.F32 {
				if err := w.ConvertTo(c.weight); err != nil {
					t.Fatal(err)
				}
			}
			l.Weight.Release()
			l.Weight = w.SetRequiresGrad(c.weight == tensor.F32)
			x := mk([]int{rows, dim}, func(i int) float64 { return 3*math.Cos(float64(i)*0.37) + 0.5 }).SetRequiresGrad(true)
			defer x.Release()
			gv := make([]float32, rows*dim)
			for i := range gv {
				gv[i] = float32(math.Sin(float64(i) * 1.3))
			}
			// pass runs forward and backward and returns y, x's and the
			// gain's gradients and the conversions each direction ran.
			pass := func(forward func(r *nn.Run) *tensor.Tensor) (out [3][]float32, converts [2]int) {
				x.SetGrad(nil)
				l.Weight.SetGrad(nil)
				err := tensor.Step(func(s *tensor.Scope) error {
					g32, err := tensor.FromFloat32(dev, gv, []int{rows, dim}, memory.Data)
					if err != nil {
						return err
					}
					g := s.Cast(g32, tensor.BF16)
					g32.Release()
					n0 := dev.converts
					y := forward(&nn.Run{Scope: s, Train: true})
					n1 := dev.converts
					if y.DType() != tensor.BF16 {
						t.Errorf("y is %v, want bf16", y.DType())
					}
					out[0] = y.Float32s()
					n2 := dev.converts
					y.Backward(tensor.WithGrad(g))
					converts = [2]int{n1 - n0, dev.converts - n2}
					return nil
				}, tensor.Autocast(tensor.BF16))
				if err != nil {
					t.Fatal(err)
				}
				out[1] = x.Grad().Float32s()
				if g := l.Weight.Grad(); g != nil {
					out[2] = g.Float32s()
				}
				return out, converts
			}
			got, gotConv := pass(func(r *nn.Run) *tensor.Tensor { return l.Forward(r, x) })
			want, wantConv := pass(func(r *nn.Run) *tensor.Tensor {
				inv := r.Pow(r.AddScalar(r.Mean(r.Square(x), true, 1), l.Eps), -0.5)
				return r.Cast(r.Mul(r.Mul(x, inv), l.Weight), tensor.BF16)
			})
			for k, name := range []string{"y", "dx", "dgain"} {
				if !slices.Equal(got[k], want[k]) {
					t.Errorf("%s differs from the F32 multiply and cast:\n got %v\nwant %v", name, got[k], want[k])
				}
			}
			if (want[2] != nil) != (c.weight == tensor.F32) {
				t.Errorf("the gain's gradient is %v with the gain trainable %v", want[2], c.weight == tensor.F32)
			}
			if gotConv != [2]int{0, 0} || wantConv != [2]int{1, 1} {
				t.Errorf("conversions forward, backward: %v (the composition: %v), want [0 0] ([1 1])", gotConv, wantConv)
			}
		})
	}
}
