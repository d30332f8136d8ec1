// Package plantrace says whether a plan traces every repetition of the
// loops whose repetitions allocate alike (package tile's tiles, the
// chunked LM head's chunks, the tiles of device's composed quantized
// product, which allocate nothing). A plan runs on a device that stores no
// values and normally traces only the repetitions that differ (the
// first two and the last), which gives the same peaks in a time that
// does not grow with the context; tests that prove it plan both ways.
package plantrace

import "sync/atomic"

var every atomic.Bool

// Every reports whether plans trace every repetition.
func Every() bool { return every.Load() }

// SetEvery makes plans trace every repetition (on) or only those that
// differ (off, the default) and returns a function that restores the
// setting before.
func SetEvery(on bool) (restore func()) {
	was := every.Swap(on)
	return func() { every.Store(was) }
}
