package tensor_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// TestFlattenEvictRematerialize: flattened parameters keep their values
// and identity; evicting frees exactly the storage's bytes and makes every
// use an error naming the tensor; rematerializing with the same values
// lets a backward that saved them before the eviction run, with the
// gradients of a run that never evicted.
func TestFlattenEvictRematerialize(t *testing.T) {
	dev := cpu.New()
	w, _ := tensor.FromFloat32(dev, []float32{1, 0, -1, 2, 0.5, 3}, []int{2, 3}, memory.Parameter)
	b, _ := tensor.FromFloat32(dev, []float32{0.25, -0.5}, []int{2}, memory.Parameter)
	w.SetName("w").SetRequiresGrad(true)
	b.SetName("b").SetRequiresGrad(true)
	defer w.Release()
	defer b.Release()
	x, _ := tensor.FromFloat32(dev, []float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, memory.Data)
	defer x.Release()

	if _, err := tensor.Flatten([]*tensor.Tensor{w, b}, []int{0, 5}, 9, memory.Parameter); err == nil {
		t.Fatal("overlapping offsets were accepted")
	}
	flat, err := tensor.Flatten([]*tensor.Tensor{w, b}, []int{0, 6}, 9, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	defer flat.Release()
	if got, want := flat.Float32s(), []float32{1, 0, -1, 2, 0.5, 3, 0.25, -0.5, 0}; !slices.Equal(got, want) {
		t.Fatalf("flat %v, want %v", got, want)
	}
	if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 36 {
		t.Fatalf("parameter bytes %d after flattening, want 36 (9 elements)", got)
	}

	var want [][]float32
	for _, evict := range []bool{false, true} {
		err := tensor.Step(func(s *tensor.Scope) error {
			y := s.Linear(x, w, b)
			l := s.Sum(s.Mul(y, y), false)
			if evict {
				if err := flat.Evict(); err != nil {
					return err
				}
				if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 0 {
					t.Errorf("parameter bytes %d while evicted, want 0", got)
				}
				var te *tensor.Error
				if err := tensor.Catch(func() error { w.Float32s(); return nil }); !errors.As(err, &te) {
					t.Errorf("reading an evicted parameter: %v, want a *tensor.Error", err)
				}
				v := w.Version()
				if err := flat.Rematerialize(func() error {
					return flat.SetFloat32s([]float32{1, 0, -1, 2, 0.5, 3, 0.25, -0.5, 0})
				}); err != nil {
					return err
				}
				if w.Version() != v {
					t.Errorf("version %d after rematerializing, want %d", w.Version(), v)
				}
			}
			l.Backward()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := [][]float32{w.Grad().Float32s(), b.Grad().Float32s()}
		w.SetGrad(nil)
		b.SetGrad(nil)
		if !evict {
			want = got
		} else if !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
			t.Fatalf("gradients %v after an eviction, want %v", got, want)
		}
	}
	flat.Release()
	w.Release()
	b.Release()
	x.Release()
	if got := dev.Memory().Stats().Requested.Current; got != 0 {
		t.Fatalf("%d bytes still allocated\n%s", got, dev.Memory().Summary())
	}
}

// TestDeferred: a deferred tensor holds no memory and cannot be read (an
// error naming it, nothing allocated); Flatten draws its values in place,
// the values tensor.Rand gives for the same seed; released unflattened,
// it frees nothing and leaks nothing.
func TestDeferred(t *testing.T) {
	dev := cpu.New()
	const seed = 7
	draw := func(v device.View) error { dev.Random(v, device.Normal, 0, 1, seed); return nil }
	d, err := tensor.Deferred(dev, tensor.F32, []int{3, 4}, memory.Parameter, draw)
	if err != nil {
		t.Fatal(err)
	}
	d.SetName("w")
	if got := dev.Memory().Stats().Requested.Current; got != 0 || !d.IsDeferred() || d.Category() != memory.Parameter {
		t.Fatalf("deferred: %d B allocated, IsDeferred %v, category %v", got, d.IsDeferred(), d.Category())
	}
	err = tensor.Catch(func() error { d.Float32s(); return nil })
	var te *tensor.Error
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "w f32 [3 4]") || !strings.Contains(err.Error(), "deferred") {
		t.Errorf("reading a deferred tensor: %v; want a *tensor.Error naming it as deferred", err)
	}
	if got := dev.Memory().Stats().Requested.Current; got != 0 {
		t.Errorf("the failed read left %d B allocated", got)
	}
	want, _ := tensor.Rand(dev, tensor.F32, []int{3, 4}, device.Normal, 0, 1, seed, memory.Parameter)
	defer want.Release()
	b, _ := tensor.FromFloat32(dev, []float32{5, 6}, []int{2}, memory.Parameter)
	defer b.Release()
	flat, err := tensor.Flatten([]*tensor.Tensor{d, b}, []int{2, 14}, 16, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	defer flat.Release()
	if d.IsDeferred() || !slices.Equal(d.Float32s(), want.Float32s()) || !slices.Equal(b.Float32s(), []float32{5, 6}) {
		t.Errorf("flattened: %v (deferred %v), %v; want %v and [5 6]", d.Float32s(), d.IsDeferred(), b.Float32s(), want.Float32s())
	}
	d.Release()

	u, _ := tensor.Deferred(dev, tensor.F32, []int{8}, memory.Parameter, draw)
	before := dev.Memory().Stats().Requested.Current
	u.Release()
	if after := dev.Memory().Stats().Requested.Current; after != before {
		t.Errorf("releasing a deferred tensor changed the allocated bytes from %d to %d", before, after)
	}
	if _, err := tensor.Deferred(dev, tensor.F32, []int{2}, memory.Parameter, nil); err == nil {
		t.Error("a deferred tensor without a fill was accepted")
	}
}

// TestDeferFrom: an import's fill replaces the draws, its end runs once
// when the storage goes (filled by Flatten, or released unfilled), and a
// fill's error is Flatten's, leaving the tensors as they were.
func TestDeferFrom(t *testing.T) {
	dev := cpu.New()
	none := func(device.View) error { return nil }
	ends := 0
	end := func() { ends++ }
	values := func(v device.View) error {
		src, err := tensor.FromFloat32(dev, []float32{1, 2, 3}, []int{3}, memory.Temporary)
		if err != nil {
			return err
		}
		defer src.Release()
		dev.Copy(v, src.View())
		return nil
	}
	a, _ := tensor.Deferred(dev, tensor.F32, []int{3}, memory.Parameter, none)
	if err := a.DeferFrom(values, end); err != nil {
		t.Fatal(err)
	}
	flat, err := tensor.Flatten([]*tensor.Tensor{a}, []int{0}, 3, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Float32s(), []float32{1, 2, 3}) || ends != 1 {
		t.Errorf("flattened: %v, end ran %d times; want [1 2 3] and once", a.Float32s(), ends)
	}
	if err := a.DeferFrom(values, end); err == nil {
		t.Error("DeferFrom on a filled tensor was accepted")
	}
	a.Release()
	flat.Release()

	b, _ := tensor.Deferred(dev, tensor.F32, []int{3}, memory.Parameter, none)
	_ = b.DeferFrom(func(device.View) error { return errors.New("truncated file") }, end)
	before := dev.Memory().Stats().Requested.Current
	if _, err := tensor.Flatten([]*tensor.Tensor{b}, []int{0}, 3, memory.Parameter); err == nil || !strings.Contains(err.Error(), "truncated file") {
		t.Errorf("a failing fill: Flatten returned %v", err)
	}
	if after := dev.Memory().Stats().Requested.Current; after != before || !b.IsDeferred() || ends != 1 {
		t.Errorf("after the failed Flatten: %d B more, deferred %v, end ran %d times", after-before, b.IsDeferred(), ends)
	}
	b.Release()
	if ends != 2 {
		t.Errorf("releasing an unfilled import ran end %d times in all, want 2", ends)
	}
}
