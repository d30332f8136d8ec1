package tensor_test

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// TestAutocastLinearFusesItsCasts holds Linear under bf16 autocast to
// its definition with the casts folded in: the F32 bias is added as
// bf16 (as PyTorch's autocast casts it), the F32 weight's and input's
// gradients are the F32 products of the bf16 operands, not rounded to
// bf16 on their way, and a second backward adds its product into the
// weight's gradient in place, allocating nothing of the weight's size.
func TestAutocastLinearFusesItsCasts(t *testing.T) {
	const rows, in, out = 6, 48, 64
	dev := cpu.New()
	dev.Memory().EnableHistory(1 << 12)
	param := func(v []float32, shape ...int) *tensor.Tensor {
		p, err := tensor.FromFloat32(dev, v, shape, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		return p.SetRequiresGrad(true)
	}
	xv, wv, bv, gv := weightValues(rows, in, 5), weightValues(out, in, 6), weightValues(1, out, 7), weightValues(rows, out, 8)
	x, w, b := param(xv, rows, in), param(wv, out, in), param(bv, out)
	defer x.Release()
	defer w.Release()
	defer b.Release()
	b16 := make([]float32, out)
	for i, v := range bv {
		b16[i] = roundBF16(v)
	}
	bRounded := param(b16, out).SetRequiresGrad(false)
	defer bRounded.Release()

	var y, yRounded []float32
	var passStart, passEnd int
	for pass := range 2 {
		passStart = len(dev.Memory().History())
		err := tensor.Step(func(s *tensor.Scope) error {
			r := s.Linear(x, w, b)
			y = r.Float32s()
			yRounded = s.Linear(x, w, bRounded).Float32s()
			g32, err := tensor.FromFloat32(dev, gv, []int{rows, out}, memory.Data)
			if err != nil {
				return err
			}
			g := s.Cast(g32, tensor.BF16)
			g32.Release()
			r.Backward(tensor.WithGrad(g))
			return nil
		}, tensor.Autocast(tensor.BF16))
		if err != nil {
			t.Fatal(err)
		}
		passEnd = len(dev.Memory().History())
		if pass == 0 {
			// The first pass's gradients, against their definitions.
			checkProduct(t, "dw", w.Grad().Float32s(), out, in, rows, func(o, k, i int) float64 {
				return float64(roundBF16(gv[i*out+o])) * float64(roundBF16(xv[i*in+k]))
			})
			checkProduct(t, "dx", x.Grad().Float32s(), rows, in, out, func(i, k, o int) float64 {
				return float64(roundBF16(gv[i*out+o])) * float64(roundBF16(wv[o*in+k]))
			})
		}
	}
	if !slices.Equal(y, yRounded) {
		t.Errorf("y with the F32 bias differs from y with the bias rounded to bf16: the bias was not added as bf16")
	}
	// The second pass added its product into the gradient: twice the first.
	checkProduct(t, "dw after two passes", w.Grad().Float32s(), out, in, rows, func(o, k, i int) float64 {
		return 2 * float64(roundBF16(gv[i*out+o])) * float64(roundBF16(xv[i*in+k]))
	})
	for _, e := range dev.Memory().History()[passStart:passEnd] {
		if e.Kind == memory.EventAlloc && e.Size >= int64(4*out*in) {
			t.Errorf("the second pass allocated %d bytes (%v): the weight's gradient was not added in place", e.Size, e.Category)
		}
	}
	if got := dev.Memory().Stats().Category(memory.Temporary).Current; got != 0 {
		t.Errorf("%d temporary bytes left after the steps (the cached bias cast?)", got)
	}
}

// checkProduct compares got [m, n] with Σ_k term(i, j, k) over k < kn,
// summed in float64, to F32 accuracy, and reports whether any element
// falls between bf16 values (a gradient rounded to bf16 would not).
func checkProduct(t *testing.T, name string, got []float32, m, n, kn int, term func(i, j, k int) float64) {
	t.Helper()
	offGrid := false
	for i := range m {
		for j := range n {
			var sum, mag float64
			for k := range kn {
				v := term(i, j, k)
				sum += v
				mag += math.Abs(v)
			}
			g := got[i*n+j]
			if math.Abs(float64(g)-sum) > 1e-6*mag+1e-30 {
				t.Fatalf("%s[%d,%d] = %v, want %v (Σ|terms| %v)", name, i, j, g, sum, mag)
			}
			offGrid = offGrid || roundBF16(g) != g
		}
	}
	if !offGrid {
		t.Errorf("%s: every element is a bf16 value: rounded to bf16 on its way", name)
	}
}

// convertCounter is the CPU device counting the copies that convert
// between dtypes: the passes autocast's casts would cost on a GPU.
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

// TestAutocastLayerNormWritesItsSavedCopy: under bf16 autocast layer norm
// saves a bf16 copy of its F32 input for backward, written by the norm's
// own kernel rather than a conversion pass, and its gradients are bit for
// bit those of the norm's backward from the input converted by Copy (the
// pass the kernel replaced).
func TestAutocastLayerNormWritesItsSavedCopy(t *testing.T) {
	const rows, n = 6, 40
	dev := &convertCounter{Device: cpu.New()}
	xv, gv, bv, dyv := weightValues(rows, n, 11), weightValues(1, n, 12), weightValues(1, n, 13), weightValues(rows, n, 14)
	for i := range xv {
		xv[i] = xv[i]*40 + 3 // far from the bf16 grid, and off-centre
	}
	for i := range gv {
		gv[i] += 1
	}
	param := func(v []float32, shape ...int) *tensor.Tensor {
		p, err := tensor.FromFloat32(dev, v, shape, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		return p.SetRequiresGrad(true)
	}
	x, gamma, beta := param(xv, rows, n), param(gv, n), param(bv, n)
	defer x.Release()
	defer gamma.Release()
	defer beta.Release()
	var converts int
	err := tensor.Step(func(s *tensor.Scope) error {
		dy32, err := tensor.FromFloat32(dev, dyv, []int{rows, n}, memory.Data)
		if err != nil {
			return err
		}
		dy := s.Cast(dy32, tensor.BF16)
		dy32.Release()
		before := dev.converts
		y := s.LayerNorm(x, gamma, beta, 1e-5)
		converts = dev.converts - before
		y.Backward(tensor.WithGrad(dy))
		return nil
	}, tensor.Autocast(tensor.BF16))
	if err != nil {
		t.Fatal(err)
	}
	if converts != 0 {
		t.Errorf("layer norm under autocast ran %d conversion passes, want 0 (its kernel writes the saved copy)", converts)
	}

	// The reference: the kernels called directly, x converted by Copy.
	var view func(dt device.DType, v []float32, shape ...int) device.View
	view = func(dt device.DType, v []float32, shape ...int) device.View {
		n := 1
		for _, d := range shape {
			n *= d
		}
		b, err := dev.Alloc(int64(n*dt.Size()), memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Free(b) })
		strides := make([]int, len(shape))
		for i, st := len(shape)-1, 1; i >= 0; i-- {
			strides[i], st = st, st*shape[i]
		}
		w := device.View{Buf: b, DType: dt, Shape: shape, Strides: strides}
		switch {
		case v == nil:
		case dt == device.F32:
			raw := make([]byte, 4*len(v))
			for i, e := range v {
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(e))
			}
			dev.Write(b, 0, raw)
		default:
			dev.Device.Copy(w, view(device.F32, v, shape...))
		}
		return w
	}
	read := func(v device.View) []float32 {
		f := view(device.F32, nil, v.Shape...)
		dev.Device.Copy(f, v)
		raw := make([]byte, 4*f.Len())
		dev.Read(raw, f.Buf, 0)
		out := make([]float32, f.Len())
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out
	}
	xr, gr, br := view(device.F32, xv, rows, n), view(device.F32, gv, n), view(device.F32, bv, n)
	y, mean, rstd := view(device.BF16, nil, rows, n), view(device.F32, nil, rows), view(device.F32, nil, rows)
	dev.Device.LayerNorm(y, device.View{}, mean, rstd, xr, gr, br, 1e-5)
	xb := view(device.BF16, nil, rows, n)
	dev.Device.Copy(xb, xr)
	dx, dg, db := view(device.F32, nil, rows, n), view(device.F32, make([]float32, n), n), view(device.F32, make([]float32, n), n)
	dev.Device.LayerNormBackward(dx, dg, db, view(device.BF16, dyv, rows, n), xb, mean, rstd, gr)
	for _, c := range []struct {
		name      string
		got, want []float32
	}{
		{"dx", x.Grad().Float32s(), read(dx)},
		{"dgamma", gamma.Grad().Float32s(), read(dg)},
		{"dbeta", beta.Grad().Float32s(), read(db)},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s differs from the backward of the input converted by Copy:\n got %v\nwant %v", c.name, c.got, c.want)
		}
	}
}
