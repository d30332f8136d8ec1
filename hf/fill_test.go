package hf

import (
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
)

// A float tensor is copied into its parameter a chunk at a time: the same
// values as the whole copy, in each dtype and deferred or not, and the
// device's temporaries never hold more than one chunk of F32 while a
// deferred model's parameters are read.
func TestFillInChunks(t *testing.T) {
	const dir = "testdata/llama3-f32"
	load := func(t *testing.T, dt device.DType, chunk int, deferred bool) ([][]float64, int64) {
		t.Helper()
		defer func(c int) { fillChunk = c }(fillChunk)
		fillChunk = chunk
		dev := cpu.New()
		l, _, err := LoadDecoderWith(dev, dir, Options{DType: dt, Defer: deferred})
		if err != nil {
			t.Fatal(err)
		}
		defer nn.Release(l)
		// What building the model took is not the fill's: a deferred
		// model's parameters are read below, as they materialize.
		dev.Memory().ResetPeak()
		for _, p := range l.Parameters() {
			if p.IsDeferred() {
				if err := p.Materialize(); err != nil {
					t.Fatal(err)
				}
			}
		}
		peak := dev.Memory().Stats().Category(memory.Temporary).Peak
		var vals [][]float64
		for _, p := range l.Parameters() {
			vals = append(vals, p.Float64s())
		}
		return vals, peak
	}
	for _, dt := range []device.DType{device.F32, device.BF16} {
		for _, deferred := range []bool{false, true} {
			whole, wholePeak := load(t, dt, 1<<30, deferred)
			chunked, peak := load(t, dt, 7, deferred)
			t.Logf("%v deferred=%v: temporary peak %d bytes whole, %d in chunks", dt, deferred, wholePeak, peak)
			if !slices.EqualFunc(whole, chunked, slices.Equal) {
				t.Errorf("%v deferred=%v: chunked loading gives other values", dt, deferred)
			}
			if deferred && peak > 7*4 {
				t.Errorf("%v deferred=%v: temporaries peaked at %d bytes, over one chunk of F32 (28)", dt, deferred, peak)
			}
		}
	}
}
