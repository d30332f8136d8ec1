package cpu

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// TestElementwiseAllocatesNothing: in steady state an elementwise kernel
// below the parallel threshold makes no heap allocation (issue 10) —
// contiguous, strided and broadcast operands, every dtype path.
func TestElementwiseAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	d := New()
	view := func(dt device.DType, shape, strides []int) device.View {
		n := 1
		for _, s := range shape {
			n *= s
		}
		b, err := d.Alloc(int64(n*dt.Size())*2, memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(b) })
		return device.View{Buf: b, DType: dt, Shape: shape, Strides: strides}
	}
	shape := []int{32, 48}
	x := view(device.F32, shape, []int{48, 1})
	y := view(device.F32, shape, []int{48, 1})
	xt := view(device.F32, shape, []int{1, 32}) // transposed
	row := view(device.F32, shape, []int{0, 1}) // broadcast row
	h := view(device.BF16, shape, []int{48, 1})
	w := view(device.F64, shape, []int{48, 1})
	d.Fill(x, 0.5)
	d.Fill(row, 1)
	cases := []struct {
		name string
		fn   func()
	}{
		{"Fill", func() { d.Fill(y, 2) }},
		{"Copy", func() { d.Copy(y, xt) }},
		{"Copy bf16", func() { d.Copy(h, x) }},
		{"Copy f64", func() { d.Copy(w, x) }},
		{"Copy same bf16", func() { d.Copy(h, h) }},
		{"Unary", func() { d.Unary(device.Gelu, y, x, 0) }},
		{"Unary bf16", func() { d.Unary(device.Exp, h, h, 0) }},
		{"UnaryBackward", func() { d.UnaryBackward(device.Tanh, y, x, x, xt, 0) }},
		{"Binary", func() { d.Binary(device.Add, y, x, row) }},
		{"Binary f64", func() { d.Binary(device.Mul, w, w, w) }},
		{"MaskedFill", func() { d.MaskedFill(y, x, row, -1) }},
		{"Dropout", func() { d.Dropout(y, x, 0.1, 7) }},
	}
	for _, c := range cases {
		c.fn() // warm the scratch pools
		if n := testing.AllocsPerRun(100, c.fn); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", c.name, n)
		}
	}
}

// TestRowKernelsAllocateNothing: softmax, layer norm and cross-entropy make
// no heap allocation per call when they spread rows over goroutines, nor
// for rows wider than the pooled chunk (issue 26), in F32 and BF16.
func TestRowKernelsAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	d := New(Threads(2))
	view := func(dt device.DType, rows, cols int) device.View {
		b, err := d.Alloc(int64(rows*cols*dt.Size()), memory.Temporary)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(b) })
		v := device.View{Buf: b, DType: dt, Shape: []int{rows, cols}, Strides: []int{cols, 1}}
		d.Fill(v, 0.25)
		return v
	}
	for _, dt := range []device.DType{device.F32, device.BF16} {
		const rows, wide = 16, 3 * chunk // wider than a chunk; 2 parts
		logits, dlogits := view(dt, rows, wide), view(dt, rows, wide)
		targets, loss, dloss := view(device.I32, rows, 1), view(device.F32, rows, 1), view(device.F32, rows, 1)
		d.Fill(targets, 3)
		x, y, dx, xc := view(dt, 64, 1024), view(dt, 64, 1024), view(dt, 64, 1024), view(device.F16, 64, 1024)
		gamma, beta, dg, db := view(device.F32, 1, 1024), view(device.F32, 1, 1024), view(device.F32, 1, 1024), view(device.F32, 1, 1024)
		gamma.Shape, gamma.Strides = []int{1024}, []int{1}
		beta.Shape, beta.Strides = gamma.Shape, gamma.Strides
		dg.Shape, dg.Strides, db.Shape, db.Strides = gamma.Shape, gamma.Strides, gamma.Shape, gamma.Strides
		mean, rstd := view(device.F32, 64, 1), view(device.F32, 64, 1)
		for _, c := range []struct {
			name string
			fn   func()
		}{
			{"CrossEntropy", func() { d.CrossEntropy(loss, logits, targets, -1, 0.1) }},
			{"CrossEntropyBackward", func() { d.CrossEntropyBackward(dlogits, logits, targets, dloss, -1, 0.1) }},
			{"Softmax", func() { d.Softmax(dlogits, logits, false) }},
			{"SoftmaxBackward", func() { d.SoftmaxBackward(dx, y, x, false) }},
			{"LayerNorm", func() { d.LayerNorm(y, device.View{}, mean, rstd, x, gamma, beta, 1e-5) }},
			{"LayerNorm with a copy of x", func() { d.LayerNorm(y, xc, mean, rstd, x, gamma, beta, 1e-5) }},
			{"LayerNormBackward", func() { d.LayerNormBackward(dx, dg, db, y, x, mean, rstd, gamma) }},
		} {
			c.fn() // warm the scratch sets and the workers
			if n := testing.AllocsPerRun(50, c.fn); n != 0 {
				t.Errorf("%s %v: %v allocations per call, want 0", c.name, dt, n)
			}
		}
	}
}
