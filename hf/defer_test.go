package hf_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// TestLoadDeferred: a deferred import holds no parameter memory; each
// parameter, flattened alone (as ZeRO-3 flattens a block), gets exactly
// the values an eager import gives it, in f32 and rounded to bf16.
func TestLoadDeferred(t *testing.T) {
	for _, c := range []struct {
		dir string
		dt  device.DType
	}{
		{"gpt2-f32", device.Invalid},
		{"gpt2-bf16", device.BF16},
		{"llama-f32", device.Invalid},
		{"llama3-f32", device.BF16},
	} {
		t.Run(c.dir, func(t *testing.T) {
			dev := cpu.New()
			path := filepath.Join("testdata", c.dir)
			eager, _, err := hf.Load(dev, path, hf.Options{DType: c.dt})
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(eager)
			before := dev.Memory().Stats().Category(memory.Parameter).Current
			lazy, _, err := hf.Load(dev, path, hf.Options{DType: c.dt, Defer: true})
			if err != nil {
				t.Fatal(err)
			}
			defer nn.Release(lazy)
			if now := dev.Memory().Stats().Category(memory.Parameter).Current; now != before {
				t.Errorf("a deferred import holds %d B of parameters", now-before)
			}
			want := eager.(models.Model).Parameters()
			for i, p := range lazy.(models.Model).Parameters() {
				if !p.IsDeferred() {
					t.Fatalf("%s is not deferred", p.Name())
				}
				flat, err := tensor.Flatten([]*tensor.Tensor{p}, []int{0}, p.Len(), memory.Parameter)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(p.Float32s(), want[i].Float32s()) || p.DType() != want[i].DType() {
					t.Errorf("%s: deferred values differ from the eager import's", p.Name())
				}
				flat.Release()
			}
		})
	}
}
