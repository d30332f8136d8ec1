package tensor_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// deferredOf is a deferred [rows, cols] parameter whose fill writes vals
// (through an F32 copy, as an import's does) and counts its end.
func deferredOf(t *testing.T, dev device.Device, dtype tensor.DType, vals []float32, shape []int, ends *int) *tensor.Tensor {
	t.Helper()
	p, err := tensor.Deferred(dev, dtype, shape, memory.Parameter, func(v device.View) error {
		src, err := tensor.FromFloat32(dev, vals, shape, memory.Temporary)
		if err != nil {
			return err
		}
		defer src.Release()
		dev.Copy(v, src.View())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.DeferFrom(func(v device.View) error {
		src, _ := tensor.FromFloat32(dev, vals, shape, memory.Temporary)
		defer src.Release()
		dev.Copy(v, src.View())
		return nil
	}, func() { *ends++ }); err != nil {
		t.Fatal(err)
	}
	return p.SetName("w")
}

// TestMaterialize: a deferred tensor drawn alone holds its fill's values
// in storage of its own, counted exactly under its category, and is an
// ordinary leaf (not evictable); its end runs once.
func TestMaterialize(t *testing.T) {
	dev := cpu.New()
	vals := make([]float32, 6*64)
	for i := range vals {
		vals[i] = float32(i%13) - 6
	}
	ends := 0
	p := deferredOf(t, dev, tensor.BF16, vals, []int{6, 64}, &ends)
	defer p.Release()
	if err := p.Materialize(); err != nil {
		t.Fatal(err)
	}
	if p.IsDeferred() || ends != 1 || p.DType() != tensor.BF16 {
		t.Fatalf("deferred %v, ends %d, dtype %v", p.IsDeferred(), ends, p.DType())
	}
	if !slices.Equal(p.Float32s(), vals) {
		t.Error("values differ from the fill's")
	}
	if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 6*64*2 {
		t.Errorf("parameter bytes %d, want %d", got, 6*64*2)
	}
	if err := p.Evict(); err == nil {
		t.Error("a materialized tensor evicts")
	}
	if err := p.Materialize(); err == nil || !strings.Contains(err.Error(), "not deferred") {
		t.Errorf("materializing twice: %v", err)
	}
	p.Release()
	if ends != 1 {
		t.Errorf("end ran %d times", ends)
	}
}

// TestMaterializeFrom: a deferred frozen weight takes a quantized
// tensor's storage and dtype (its fill never runs, its end does); the
// bytes counted are the quantized tensor's exactly. What it refuses, it
// refuses with an error, and the source stays the caller's.
func TestMaterializeFrom(t *testing.T) {
	dev := cpu.New()
	vals := make([]float32, 4*128)
	for i := range vals {
		vals[i] = float32(i%29)*0.01 - 0.1
	}
	ends := 0
	p := deferredOf(t, dev, tensor.F32, vals, []int{4, 128}, &ends)
	defer p.Release()
	q, err := tensor.QuantizeFloat32(dev, tensor.NF4, vals, []int{4, 128}, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	want := q.Float32s()
	p.SetRequiresGrad(true) // as a builder makes it
	if err := p.MaterializeFrom(q); err == nil || !strings.Contains(err.Error(), "requires grad") {
		t.Fatalf("a quantized source for a weight that requires grad: %v", err)
	}
	p.SetRequiresGrad(false)
	if err := p.MaterializeFrom(q); err != nil {
		t.Fatal(err)
	}
	if !q.Released() || p.DType() != tensor.NF4 || ends != 1 || p.IsDeferred() {
		t.Fatalf("source released %v, dtype %v, ends %d", q.Released(), p.DType(), ends)
	}
	if !slices.Equal(p.Float32s(), want) {
		t.Error("values differ from the quantized source's")
	}
	if got, w := dev.Memory().Stats().Category(memory.Parameter).Current, device.NF4Bytes(4*128); got != w {
		t.Errorf("parameter bytes %d, want %d", got, w)
	}

	r := deferredOf(t, dev, tensor.F32, vals, []int{4, 128}, &ends)
	defer r.Release()
	var shared *tensor.Tensor
	defer func() { shared.Release() }()
	for _, c := range []struct {
		name string
		src  func() *tensor.Tensor
		want string
	}{
		{"shape", func() *tensor.Tensor { s, _ := tensor.New(dev, tensor.F32, []int{128, 4}, memory.Parameter); return s }, "the source is [128 4]"},
		{"category", func() *tensor.Tensor { s, _ := tensor.New(dev, tensor.F32, []int{4, 128}, memory.Temporary); return s }, "counted as temporary"},
		{"shared", func() *tensor.Tensor {
			s, _ := tensor.New(dev, tensor.F32, []int{4, 128}, memory.Parameter)
			shared = s.Alias(s) // a second handle on the storage
			return s
		}, "held by one handle"},
	} {
		s := c.src()
		err := r.MaterializeFrom(s)
		var te *tensor.Error
		if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a *tensor.Error with %q", c.name, err, c.want)
		}
		if s.Released() || !r.IsDeferred() {
			t.Errorf("%s: a refused source was taken", c.name)
		}
		s.Release()
	}
	if err := p.MaterializeFrom(r); err == nil || !strings.Contains(err.Error(), "not deferred") {
		t.Errorf("into a materialized tensor: %v", err)
	}
}

// A deferred weight (a model built with nn.Builder.Defer) takes a
// quantized tensor's storage in place of its float values: how an import
// quantizes a weight from its host values without the device ever holding
// it in F32.
func ExampleTensor_MaterializeFrom() {
	dev := cpu.New()
	w, _ := tensor.Deferred(dev, tensor.F32, []int{2, 64}, memory.Parameter, func(v device.View) error {
		dev.Fill(v, 1) // what the float weight would have held
		return nil
	})
	defer w.Release()
	vals := make([]float32, 128)
	for i := range vals {
		vals[i] = float32(i%8) / 8
	}
	q, _ := tensor.QuantizeFloat32(dev, tensor.NF4, vals, []int{2, 64}, memory.Parameter)
	if err := w.MaterializeFrom(q); err != nil {
		fmt.Println(err)
	}
	fmt.Println(w.DType(), w.Float32s()[:8], dev.Memory().Stats().Category(memory.Parameter).Current == device.NF4Bytes(128))
	// Output: nf4 [0 0.14081393 0.21534826 0.3856211 0.49228987 0.63258725 0.63258725 0.875] true
}
