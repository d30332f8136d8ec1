package tensor_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// weightValues returns out×in weights of several scales.
func weightValues(out, in int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 3))
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02 * math.Pow(2, float64(i/in%5)))
	}
	return w
}

// quantizedParam returns a frozen parameter of w converted to dtype, and
// the values device's definition gives it.
func quantizedParam(t *testing.T, dev device.Device, dtype tensor.DType, w []float32, shape []int) (*tensor.Tensor, []float32) {
	t.Helper()
	p, err := tensor.FromFloat32(dev, w, shape, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ConvertTo(dtype); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(w))
	if dtype == tensor.NF4 {
		q, _ := device.QuantizeNF4(w)
		for i := range want {
			want[i] = q.Value(i)
		}
	} else {
		q, _ := device.QuantizeInt8(w)
		for i := range want {
			want[i] = q.Value(i)
		}
	}
	return p, want
}

// TestConvertToQuantized quantizes a parameter in place: exact bytes in
// the parameter category, the definition's values, and back to F32.
func TestConvertToQuantized(t *testing.T) {
	for _, dtype := range []tensor.DType{tensor.NF4, tensor.Int8} {
		t.Run(dtype.String(), func(t *testing.T) {
			dev := cpu.New()
			w := weightValues(96, 160, 1)
			p, want := quantizedParam(t, dev, dtype, w, []int{96, 160})
			defer p.Release()
			if p.DType() != dtype || p.Bytes() != device.Bytes(dtype, len(w)) {
				t.Fatalf("%v, %d bytes; want %v, %d", p.DType(), p.Bytes(), dtype, device.Bytes(dtype, len(w)))
			}
			if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != device.Bytes(dtype, len(w)) {
				t.Errorf("parameter bytes %d, want %d", got, device.Bytes(dtype, len(w)))
			}
			got := p.Float32s()
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("Float32s[%d] = %v, the definition gives %v", i, got[i], want[i])
				}
			}
			// Cast dequantizes as Float32s does; ConvertTo back to F32 too.
			err := tensor.Step(func(s *tensor.Scope) error {
				c := s.Cast(p, tensor.BF16)
				for i, v := range c.Float32s() {
					if v != roundBF16(want[i]) {
						t.Fatalf("Cast to bf16 [%d] = %v, want %v", i, v, roundBF16(want[i]))
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.ConvertTo(tensor.F32); err != nil {
				t.Fatal(err)
			}
			for i, v := range p.Float32s() {
				if v != want[i] {
					t.Fatalf("back in F32 [%d] = %v, want %v", i, v, want[i])
				}
			}
			if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != int64(4*len(w)) {
				t.Errorf("parameter bytes back in F32: %d", got)
			}
		})
	}
}

// TestQuantizedLinearEqualsDequantized holds Linear with a quantized
// weight to Linear with the weight's dequantized values, bit for bit on
// the CPU (the product decodes into the panels the dense product packs),
// forward and backward, in F32 and under bf16 autocast; the weight gets
// no gradient, the input and bias theirs.
func TestQuantizedLinearEqualsDequantized(t *testing.T) {
	for _, dtype := range []tensor.DType{tensor.NF4, tensor.Int8} {
		for _, ac := range []tensor.DType{device.Invalid, tensor.BF16} {
			name := "no autocast"
			if ac != device.Invalid {
				name = "autocast " + ac.String()
			}
			t.Run(dtype.String()+"/"+name, func(t *testing.T) {
				dev := cpu.New()
				out, in := 70, 130
				w := weightValues(out, in, 2)
				wq, vals := quantizedParam(t, dev, dtype, w, []int{out, in})
				defer wq.Release()
				wd, _ := tensor.FromFloat32(dev, vals, []int{out, in}, memory.Parameter)
				defer wd.Release()
				xv := weightValues(2*9, in, 3)
				run := func(weight *tensor.Tensor) (y, dx, db []float32) {
					x, _ := tensor.FromFloat32(dev, xv, []int{2, 9, in}, memory.Data)
					defer x.Release()
					x.SetRequiresGrad(true)
					b, _ := tensor.Full(dev, tensor.F32, []int{out}, 0.25, memory.Parameter)
					defer b.Release()
					b.SetRequiresGrad(true)
					opts := []tensor.ScopeOption{}
					if ac != device.Invalid {
						opts = append(opts, tensor.Autocast(ac))
					}
					err := tensor.Step(func(s *tensor.Scope) error {
						r := s.Linear(x, weight, b)
						y = r.Float32s()
						s.Sum(s.Mul(r, r), false).Backward()
						return nil
					}, opts...)
					if err != nil {
						t.Fatal(err)
					}
					if weight.Grad() != nil {
						t.Errorf("the weight has a gradient")
					}
					return y, x.Grad().Float32s(), b.Grad().Float32s()
				}
				wy, wdx, wdb := run(wd)
				gy, gdx, gdb := run(wq)
				for name, p := range map[string][2][]float32{"y": {gy, wy}, "dx": {gdx, wdx}, "db": {gdb, wdb}} {
					for i := range p[1] {
						if math.Float32bits(p[0][i]) != math.Float32bits(p[1][i]) {
							t.Fatalf("%s[%d] = %v, with the dequantized weight %v", name, i, p[0][i], p[1][i])
						}
					}
				}
			})
		}
	}
}

// TestQuantizedLinearGradient checks dx by finite differences in F64.
func TestQuantizedLinearGradient(t *testing.T) {
	dev := cpu.New()
	out, in := 6, 70
	wq, _ := quantizedParam(t, dev, tensor.NF4, weightValues(out, in, 4), []int{out, in})
	defer wq.Release()
	rng := rand.New(rand.NewPCG(5, 5))
	xv := make([]float64, 3*in)
	for i := range xv {
		xv[i] = rng.Float64()*2 - 1
	}
	rv := make([]float64, 3*out)
	for i := range rv {
		rv[i] = rng.Float64()*2 - 1
	}
	loss := func(xs []float64, grad bool) (float64, []float64) {
		x, _ := tensor.FromFloat64(dev, xs, []int{3, in}, memory.Data)
		defer x.Release()
		x.SetRequiresGrad(grad)
		r, _ := tensor.FromFloat64(dev, rv, []int{3, out}, memory.Data)
		defer r.Release()
		var l float64
		var g []float64
		err := tensor.Step(func(s *tensor.Scope) error {
			v := s.Sum(s.Mul(s.Linear(x, wq, nil), r), false)
			l = v.Item()
			if grad {
				v.Backward()
				g = x.Grad().Float64s()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return l, g
	}
	_, g := loss(xv, true)
	const h = 1e-6
	for i := range xv {
		p := append([]float64(nil), xv...)
		p[i] += h
		lp, _ := loss(p, false)
		p[i] -= 2 * h
		lm, _ := loss(p, false)
		if fd := (lp - lm) / (2 * h); math.Abs(fd-g[i]) > 1e-6*math.Max(1, math.Abs(fd)) {
			t.Fatalf("dx[%d] = %v, finite differences %v", i, g[i], fd)
		}
	}
}

// TestQuantizedMatMul: MatMul by a quantized [K, N] matrix equals MatMul
// by its values, and passes the first operand its gradient.
func TestQuantizedMatMul(t *testing.T) {
	dev := cpu.New()
	wq, vals := quantizedParam(t, dev, tensor.Int8, weightValues(64, 40, 6), []int{64, 40})
	defer wq.Release()
	wd, _ := tensor.FromFloat32(dev, vals, []int{64, 40}, memory.Parameter)
	defer wd.Release()
	xv := weightValues(2*5, 64, 7)
	var res [2][2][]float32
	for k, w := range []*tensor.Tensor{wd, wq} {
		x, _ := tensor.FromFloat32(dev, xv, []int{2, 5, 64}, memory.Data)
		x.SetRequiresGrad(true)
		err := tensor.Step(func(s *tensor.Scope) error {
			y := s.ScaledMatMul(x, w, 0.5)
			res[k][0] = y.Float32s()
			s.Sum(s.Square(y), false).Backward()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		res[k][1] = x.Grad().Float32s()
		x.Release()
	}
	for j, name := range []string{"y", "dx"} {
		for i, v := range res[0][j] {
			if res[1][j][i] != v {
				t.Fatalf("%s[%d] = %v, with the dequantized matrix %v", name, i, res[1][j][i], v)
			}
		}
	}
}

// TestQuantizedRefusals: every other op, making it trainable, quantizing
// a trainable parameter, and a quantized first operand are errors that
// name the op.
func TestQuantizedRefusals(t *testing.T) {
	dev := cpu.New()
	wq, _ := quantizedParam(t, dev, tensor.NF4, weightValues(8, 64, 8), []int{8, 64})
	defer wq.Release()
	x, _ := tensor.FromFloat32(dev, make([]float32, 64*8), []int{8, 64}, memory.Data)
	defer x.Release()
	for _, c := range []struct {
		op string
		fn func(s *tensor.Scope)
	}{
		{"add", func(s *tensor.Scope) { s.Add(wq, wq) }},
		{"reshape", func(s *tensor.Scope) { s.Reshape(wq, 64, 8) }},
		{"transpose", func(s *tensor.Scope) { s.Transpose(wq, 0, 1) }},
		{"matmul", func(s *tensor.Scope) { s.MatMul(wq, x) }},
		{"linear", func(s *tensor.Scope) { s.Linear(wq, x, nil) }},
		{"cast", func(s *tensor.Scope) { s.Cast(x, tensor.NF4) }},
		{"SetRequiresGrad", func(s *tensor.Scope) { wq.SetRequiresGrad(true) }},
		{"Fill", func(s *tensor.Scope) { wq.Fill(1) }},
		{"AllFinite", func(s *tensor.Scope) { wq.AllFinite() }},
	} {
		err := tensor.Catch(func() error { c.fn(tensor.NewScope()); return nil })
		var te *tensor.Error
		if !errors.As(err, &te) || te.Op != c.op {
			t.Errorf("%s: %v, want a *tensor.Error of op %s", c.op, err, c.op)
		}
	}
	p, _ := tensor.FromFloat32(dev, make([]float32, 64), []int{1, 64}, memory.Parameter)
	defer p.Release()
	p.SetRequiresGrad(true)
	if err := p.ConvertTo(tensor.NF4); err == nil || !strings.Contains(err.Error(), "requires grad") {
		t.Errorf("quantizing a trainable parameter: %v", err)
	}
	bad := make([]float32, 64)
	bad[9] = float32(math.Inf(-1))
	q, _ := tensor.FromFloat32(dev, bad, []int{1, 64}, memory.Parameter)
	defer q.Release()
	if err := q.ConvertTo(tensor.Int8); err == nil || !strings.Contains(err.Error(), "element 9") {
		t.Errorf("quantizing an infinity: %v", err)
	}
	if q.DType() != tensor.F32 {
		t.Errorf("a failed conversion changed the dtype to %v", q.DType())
	}
}

// TestQuantizedPlanBytes: on the meta device a conversion accounts the
// quantized bytes exactly, with the float storage's at the peak.
func TestQuantizedPlanBytes(t *testing.T) {
	dev := meta.New(0)
	p, err := tensor.New(dev, tensor.BF16, []int{4096, 1024}, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	if err := p.ConvertTo(tensor.NF4); err != nil {
		t.Fatal(err)
	}
	st := dev.Memory().Stats()
	want := device.NF4Bytes(4096 * 1024)
	if got := st.Category(memory.Parameter).Current; got != want {
		t.Errorf("parameter bytes %d, want %d", got, want)
	}
	if got := st.Requested.Peak; got != want+2*4096*1024 {
		t.Errorf("peak %d, want %d (bf16 and nf4 at once)", got, want+2*4096*1024)
	}
}

func TestQuantizeFloat32AndFromNF4(t *testing.T) {
	dev := cpu.New()
	w := weightValues(33, 65, 9)
	for _, dtype := range []tensor.DType{tensor.NF4, tensor.Int8} {
		q, err := tensor.QuantizeFloat32(dev, dtype, w, []int{33, 65}, memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		c, want := quantizedParam(t, dev, dtype, w, []int{33, 65})
		got := q.Float32s()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: value %d = %v, want %v", dtype, i, got[i], want[i])
			}
		}
		q.Release()
		c.Release()
	}
	parts, _ := device.QuantizeNF4(w)
	q, err := tensor.FromNF4(dev, []int{33, 65}, parts, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Release()
	for i, v := range q.Float32s() {
		if v != parts.Value(i) {
			t.Fatalf("FromNF4 value %d = %v, want %v", i, v, parts.Value(i))
		}
	}
	if _, err := tensor.FromNF4(dev, []int{33, 64}, parts, memory.Parameter); err == nil {
		t.Error("FromNF4 took parts of another shape")
	}
}

// roundBF16 rounds a finite float32 to bfloat16 (nearest even).
func roundBF16(f float32) float32 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}
