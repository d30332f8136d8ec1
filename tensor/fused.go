package tensor

import (
	"slices"

	"github.com/memfit/memfit/device"
)

// Fused optimizer updates: one kernel per parameter, no temporaries. The
// parameter and state tensors are updated in place (their versions go up);
// all must be contiguous, of one shape, on one device.

func checkFused(op string, p, g *Tensor, state ...*Tensor) {
	sameDevice(op, append([]*Tensor{p, g}, state...)...)
	for _, t := range append([]*Tensor{p, g}, state...) {
		if t == nil {
			continue
		}
		if !slices.Equal(t.shape, p.shape) {
			panic(errorf(op, "%s does not match parameter %s", t.describe(), p.describe()))
		}
		if !t.IsContiguous() {
			panic(errorf(op, "%s is not contiguous", t.describe()))
		}
	}
}

// AdamStep applies one Adam/AdamW update to p from gradient g with state
// m and v (F32, shaped like p).
func AdamStep(p, g, m, v *Tensor, h device.AdamHyper) {
	checkFused("adam_step", p, g, m, v)
	device.AdamStep(p.st.dev, p.view(), g.view(), m.view(), v.view(), h)
	p.st.version.Add(1)
	m.st.version.Add(1)
	v.st.version.Add(1)
}

// SGDStep applies one SGD update to p from gradient g; buf is the
// momentum buffer (nil without momentum).
func SGDStep(p, g, buf *Tensor, h device.SGDHyper) {
	checkFused("sgd_step", p, g, buf)
	var bv device.View
	if buf != nil {
		bv = buf.view()
		buf.st.version.Add(1)
	}
	device.SGDStep(p.st.dev, p.view(), g.view(), bv, h)
	p.st.version.Add(1)
}
