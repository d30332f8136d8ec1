package tensor_test

import (
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// A Root differentiates the graph of a tensor already released, whose
// storage went with it: the leaves get the gradients the tensor's own
// Backward gives, and releasing the Root frees the graph.
func TestRootBackwardAfterRelease(t *testing.T) {
	const n = 1000
	grads := func(viaRoot bool) []float64 {
		dev := cpu.New()
		mem := dev.Memory()
		x, err := tensor.Full(dev, tensor.F32, []int{n}, 0.5, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Release()
		x.SetRequiresGrad(true)
		g, err := tensor.Full(dev, tensor.F32, []int{n}, 1.5, memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Release()
		s := tensor.NewScope()
		a := s.MulScalar(x, 3)
		y := s.Mul(a, a) // saves a, not y
		if viaRoot {
			root := y.Root()
			before := mem.Stats().Requested.Current
			y.Release()
			if freed := before - mem.Stats().Requested.Current; freed != 4*n {
				t.Errorf("releasing the tensor freed %d bytes, want its %d: the Root holds its storage", freed, 4*n)
			}
			root.Backward(tensor.WithGrad(g))
			root.Release()
			root.Release() // idempotent
		} else {
			y.Backward(tensor.WithGrad(g))
		}
		s.Close()
		out := x.Grad().Float64s()
		x.SetGrad(nil)
		if cur := mem.Stats().Requested.Current; cur != 8*n {
			t.Errorf("%d bytes left after backward and release, want the leaf's and the gradient seed's %d", cur, 8*n)
		}
		return out
	}
	want, got := grads(false), grads(true)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: %v through the Root, %v through the tensor", i, got[i], want[i])
		}
	}
}

// WithGradTaken hands the gradient over: it is freed once the root's node
// has run, before the nodes below it run (the handle given is released),
// where WithGrad's stays until Backward returns.
func TestWithGradTakenFreesEarly(t *testing.T) {
	const n = 1000
	for _, taken := range []bool{false, true} {
		dev := cpu.New()
		mem := dev.Memory()
		x, err := tensor.Full(dev, tensor.F32, []int{n}, 0.5, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		x.SetRequiresGrad(true)
		s := tensor.NewScope()
		// p is a Function whose backward sees the allocator while it runs:
		// after y's node, which made p's gradient (n floats).
		plain := tensor.NewScope(tensor.NoGrad())
		v := plain.Keep(plain.MulScalar(x, 1))
		plain.Close()
		var during int64
		p := s.Function("probe", v, []*tensor.Tensor{x}, nil, func(bs *tensor.Scope, g *tensor.Tensor, _ []*tensor.Tensor) []*tensor.Tensor {
			during = mem.Stats().Requested.Current
			return []*tensor.Tensor{bs.MulScalar(g, 1)}
		})
		y := s.MulScalar(p, 2)
		g, err := tensor.Full(dev, tensor.F32, []int{n}, 1, memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		start := mem.Stats().Requested.Current
		if taken {
			y.Backward(tensor.WithGradTaken(g))
			if !g.Released() {
				t.Error("WithGradTaken: the gradient's handle is not released")
			}
		} else {
			y.Backward(tensor.WithGrad(g))
			g.Release()
		}
		// y's node made p's gradient; the seed is gone when taken.
		want := start + 4*n
		if taken {
			want = start
		}
		if during != want {
			t.Errorf("taken %v: %d bytes allocated while the node below the root ran, want %d", taken, during, want)
		}
		s.Close()
		x.Release()
		if cur := mem.Stats().Requested.Current; cur != 0 {
			t.Errorf("taken %v: %d bytes left", taken, cur)
		}
	}
}
