package optim

import "github.com/memfit/memfit/tensor"

// Updates are one fused kernel per parameter (tensor.AdamStep,
// tensor.SGDStep; Step gives Adam's to the device in groups where it can,
// tensor.AdamSteps) and make no temporaries. Reductions over gradients (the
// global norm) run chunk by chunk so that their temporaries hold at most
// chunkElems elements whatever the size of the largest parameter.

// chunkElems is the most elements one temporary of an update holds (a
// variable so that tests can make parameters span many chunks).
var chunkElems = 1 << 18

// chunked calls fn with matching 1-D views of ts (same length; nil entries
// stay nil), chunkElems elements at a time. Parameters and buffers are
// contiguous, so their views write through to them.
func chunked(s *tensor.Scope, ts []*tensor.Tensor, fn func(v []*tensor.Tensor)) {
	n := ts[0].Len()
	flat := make([]*tensor.Tensor, len(ts))
	for i, t := range ts {
		if t != nil {
			flat[i] = s.Reshape(t, n)
		}
	}
	defer release(flat...)
	views := make([]*tensor.Tensor, len(ts))
	for lo := 0; lo < n; lo += chunkElems {
		k := min(chunkElems, n-lo)
		for i, f := range flat {
			if f != nil {
				views[i] = s.Narrow(f, 0, lo, k)
			}
		}
		fn(views)
		release(views...)
	}
}
