package data

import (
	"context"
	"slices"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

func TestBatchToDevice(t *testing.T) {
	images := gridImages{n: 10, c: 1, h: 3, w: 4}
	text, _ := NewSyntheticText(SyntheticTextConfig{N: 10, Context: 16, Seed: 1})
	for _, tc := range []struct {
		name string
		ds   Dataset
	}{{"images", images}, {"windows", text}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := cpu.New()
			l, _ := NewLoader(tc.ds, LoaderConfig{Batch: 4, Workers: 1, Prefetch: 1})
			for b, err := range l.All(context.Background()) {
				if err != nil {
					t.Fatal(err)
				}
				in, tg, err := b.ToDevice(dev)
				if err != nil {
					t.Fatal(err)
				}
				if got := dev.Memory().Stats().Category(memory.Data).Current; got != b.Bytes() {
					t.Errorf("batch %d: Data holds %d bytes, want %d", b.Index, got, b.Bytes())
				}
				if !slices.Equal(in.Shape(), b.InputShape) || !slices.Equal(tg.Shape(), b.TargetShape) || in.Category() != memory.Data {
					t.Errorf("tensors of %v and %v, batch of %v and %v", in.Shape(), tg.Shape(), b.InputShape, b.TargetShape)
				}
				if b.Inputs != nil && !slices.Equal(in.Float32s(), b.Inputs) {
					t.Error("input tensor differs from the batch")
				}
				if b.Tokens != nil && in.DType() != tensor.I32 {
					t.Errorf("token tensor of %v", in.DType())
				}
				in.Release()
				tg.Release()
				if got := dev.Memory().Stats().Category(memory.Data).Current; got != 0 {
					t.Errorf("after Release, Data holds %d bytes", got)
				}
			}
		})
	}
}

func TestBatchToDeviceOOMReleases(t *testing.T) {
	b := &Batch{Indices: make([]int, 2), Inputs: make([]float32, 2*1024), InputShape: []int{2, 1024}, Targets: make([]int32, 1<<20), TargetShape: []int{1 << 20}}
	dev := cpu.New(cpu.Capacity(64 << 10))
	if _, _, err := b.ToDevice(dev); err == nil {
		t.Fatal("targets larger than the device: no error")
	}
	if got := dev.Memory().Stats().Category(memory.Data).Current; got != 0 {
		t.Errorf("after a failed copy, Data holds %d bytes", got)
	}
}
