package memory

import "testing"

func TestWatermarkSurvivesResetPeak(t *testing.T) {
	a, _ := newTestAllocator(0)
	w := a.NewWatermark()
	b := mustAlloc(t, a, 4096, Activation)
	a.Free(b)
	a.ResetPeak()
	c := mustAlloc(t, a, 1024, Activation)
	if got := w.PeakOf(Activation); got != 4096 {
		t.Errorf("watermark activation peak %d, want 4096", got)
	}
	if got := a.Stats().Category(Activation).Peak; got != 1024 {
		t.Errorf("allocator peak %d after ResetPeak, want 1024", got)
	}
	a.Recategorize(c, Gradient)
	if w.PeakOf(Gradient) != 1024 || w.Peak() != 4096 {
		t.Errorf("gradient peak %d total %d", w.PeakOf(Gradient), w.Peak())
	}
	w.Close()
	w.Close()
	d := mustAlloc(t, a, 1<<20, Activation)
	if w.PeakOf(Activation) != 4096 {
		t.Errorf("a closed watermark still records")
	}
	a.Free(c)
	a.Free(d)
}
