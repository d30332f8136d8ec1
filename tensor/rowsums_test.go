package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// rowsLayer is y = (x·wᵀ + b) ⊙ g, the three kinds of sums over rows a
// parameter's gradient can be: a product's (w), a bias's reduction (b) and
// a broadcast gain's (g).
func rowsLayer(s *tensor.Scope, x, w, b, g *tensor.Tensor) *tensor.Tensor {
	h := s.Linear(x, w, b)
	y := s.Mul(h, g)
	h.Release()
	return y
}

// Summed under tensor.SumRows over runs of rows that start on the GEMM's K
// blocks and span more than one (2048 and 2560 rows), the parameters'
// gradients are a pass over all the rows bit for bit, in F64, F32 and with
// bf16 products; the ordinary ops hand them back otherwise.
func TestRowSumsContinueTheWholePass(t *testing.T) {
	const rows, in, out, cut = 4608, 24, 40, 2048
	for _, tc := range []struct {
		dt, autocast tensor.DType
	}{{tensor.F64, device.Invalid}, {tensor.F32, device.Invalid}, {tensor.F32, tensor.BF16}} {
		t.Run(fmt.Sprintf("%v/autocast=%v", tc.dt, tc.autocast == tensor.BF16), func(t *testing.T) {
			dev := cpu.New()
			rand := func(shape []int, seed uint64) *tensor.Tensor {
				x, err := tensor.Rand(dev, tc.dt, shape, device.Normal, 0, 1, seed, memory.Parameter)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(x.Release)
				return x
			}
			x, gy := rand([]int{rows, in}, 1), rand([]int{rows, out}, 2)
			w, b, g := rand([]int{out, in}, 3), rand([]int{out}, 4), rand([]int{out}, 5)
			params := []*tensor.Tensor{w, b, g}
			for _, p := range params {
				p.SetRequiresGrad(true)
			}
			var opts []tensor.ScopeOption
			if tc.autocast != device.Invalid {
				opts = append(opts, tensor.Autocast(tc.autocast))
			}
			// The whole pass.
			err := tensor.Step(func(s *tensor.Scope) error {
				y := rowsLayer(s, x, w, b, g)
				y.Backward(tensor.WithGrad(gy))
				return nil
			}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			var want [][]float64
			for _, p := range params {
				want = append(want, p.Grad().Float64s())
				p.SetGrad(nil)
			}
			// Two runs of rows, summed.
			sums := tensor.NewRowSums(params)
			defer sums.Release()
			for _, run := range [][2]int{{0, cut}, {cut, rows - cut}} {
				err := tensor.Step(func(s *tensor.Scope) error {
					xr := s.Narrow(x, 0, run[0], run[1])
					gr := s.Narrow(gy, 0, run[0], run[1])
					y := rowsLayer(s, xr, w, b, g)
					y.Backward(tensor.WithGrad(gr))
					return nil
				}, append(opts, tensor.SumRows(sums))...)
				if err != nil {
					t.Fatal(err)
				}
			}
			for i, p := range params {
				if p.Grad() != nil {
					t.Fatalf("%d: the parameter received its gradient under SumRows", i)
				}
				got := sums.Gradient(p)
				if got.DType() != p.DType() && (tc.autocast == device.Invalid || i != 0) {
					t.Errorf("%d: gradient in %v", i, got.DType())
				}
				for j, v := range got.Float64s() {
					if math.Float64bits(v) != math.Float64bits(want[i][j]) {
						t.Fatalf("parameter %d element %d: %v summed over two runs, %v over the whole", i, j, v, want[i][j])
					}
				}
				got.Release()
			}
		})
	}
}

// Parameters that need no gradient are not summed, and a parameter no rows
// reached has no gradient.
func TestRowSumsSkipFrozen(t *testing.T) {
	dev := cpu.New()
	w, _ := tensor.Rand(dev, tensor.F32, []int{3, 4}, device.Normal, 0, 1, 1, memory.Parameter)
	f, _ := tensor.Rand(dev, tensor.F32, []int{3, 4}, device.Normal, 0, 1, 2, memory.Parameter)
	defer w.Release()
	defer f.Release()
	w.SetRequiresGrad(true)
	sums := tensor.NewRowSums([]*tensor.Tensor{w, f})
	defer sums.Release()
	if g := sums.Gradient(w); g != nil {
		t.Errorf("gradient %v before any rows", g)
	}
	if g := sums.Gradient(f); g != nil {
		t.Errorf("a frozen parameter's gradient: %v", g)
	}
}
