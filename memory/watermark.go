package memory

// Watermark records the peak of requested bytes, in total and per
// category, from its creation until Close, without touching the
// allocator's own peaks (which ResetPeak resets). Code that must measure
// a region of a program — a checkpoint policy calibrating itself while the
// training loop resets peaks every step — uses one.
type Watermark struct {
	a          *Allocator
	total      int64
	byCategory [NumCategories]int64
	state      int64 // peak of Parameter + Gradient + OptimizerState
	closed     bool
}

// modelState is the bytes of what ZeRO calls the model states:
// parameters, gradients and optimizer state, together.
func (a *Allocator) modelState() int64 {
	return a.st.ByCategory[Parameter].Current + a.st.ByCategory[Gradient].Current + a.st.ByCategory[OptimizerState].Current
}

// NewWatermark starts recording peaks from the current values.
func (a *Allocator) NewWatermark() *Watermark {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := &Watermark{a: a, total: a.st.Requested.Current, state: a.modelState()}
	for c := range w.byCategory {
		w.byCategory[c] = a.st.ByCategory[c].Current
	}
	a.marks = append(a.marks, w)
	return w
}

// observe updates every open watermark; the caller holds a.mu.
func (a *Allocator) observe() {
	for _, w := range a.marks {
		w.total = max(w.total, a.st.Requested.Current)
		w.state = max(w.state, a.modelState())
		for c := range w.byCategory {
			w.byCategory[c] = max(w.byCategory[c], a.st.ByCategory[c].Current)
		}
	}
}

// Peak is the highest requested-byte total seen since the watermark began.
func (w *Watermark) Peak() int64 {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	return w.total
}

// PeakOf is the highest value category c reached since the watermark began.
func (w *Watermark) PeakOf(c Category) int64 {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	return w.byCategory[c]
}

// PeakOfModelState is the highest sum of the Parameter, Gradient and
// OptimizerState categories seen since the watermark began: the peak of
// the model states at one moment, which the sum of their separate peaks
// overstates (parameters sharded by ZeRO-3 are whole while gradients are
// not yet reduced, and not while the optimizer steps).
func (w *Watermark) PeakOfModelState() int64 {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	return w.state
}

// Close stops recording. It is idempotent.
func (w *Watermark) Close() {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	for i, m := range w.a.marks {
		if m == w {
			w.a.marks = append(w.a.marks[:i], w.a.marks[i+1:]...)
			break
		}
	}
}
