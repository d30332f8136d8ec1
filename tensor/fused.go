package tensor

import (
	"slices"

	"github.com/memfit/memfit/device"
)

// Fused optimizer updates: one kernel per parameter (or per group of
// parameters: AdamSteps), no temporaries. The
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

// AdamSteps applies AdamStep(ps[i], gs[i], ms[i], vs[i], h) for every i
// with one call to the device (device.AdamSteps: a few kernel launches
// for all of them where the device has a group kernel). All tensors are
// on one device, and no two parameters or moments share memory.
func AdamSteps(ps, gs, ms, vs []*Tensor, h device.AdamHyper) {
	if len(gs) != len(ps) || len(ms) != len(ps) || len(vs) != len(ps) {
		panic(errorf("adam_step", "%d parameters with %d gradients, %d and %d moments", len(ps), len(gs), len(ms), len(vs)))
	}
	if len(ps) == 0 {
		return
	}
	pv, gv, mv, vv := make([]device.View, len(ps)), make([]device.View, len(ps)), make([]device.View, len(ps)), make([]device.View, len(ps))
	for i, p := range ps {
		checkFused("adam_step", p, gs[i], ms[i], vs[i])
		sameDevice("adam_step", ps[0], p)
		pv[i], gv[i], mv[i], vv[i] = p.view(), gs[i].view(), ms[i].view(), vs[i].view()
	}
	device.AdamSteps(ps[0].st.dev, pv, gv, mv, vv, h)
	for i, p := range ps {
		p.st.version.Add(1)
		ms[i].st.version.Add(1)
		vs[i].st.version.Add(1)
	}
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

// Adam8bitStep applies one 8-bit Adam/AdamW update (device.Adam8bitBlock)
// to p (F32) from gradient g (F32) with moments held as codes m and v (U8,
// shaped like p) and scales mScale and vScale (F32, one per
// device.Quant8Block elements of p, 1-D).
func Adam8bitStep(p, g, m, v, mScale, vScale *Tensor, h device.AdamHyper) {
	checkFused("adam8bit_step", p, g, m, v)
	sameDevice("adam8bit_step", p, mScale, vScale)
	for _, t := range []*Tensor{p, g} {
		if t.dtype != F32 {
			panic(errorf("adam8bit_step", "%s: the 8-bit step updates f32 parameters from f32 gradients", t.describe()))
		}
	}
	for _, t := range []*Tensor{m, v} {
		if t.dtype != U8 {
			panic(errorf("adam8bit_step", "%s: want u8 codes", t.describe()))
		}
	}
	nb := device.Quant8Blocks(p.Len())
	for _, t := range []*Tensor{mScale, vScale} {
		if t.dtype != F32 || t.Len() != nb || !t.IsContiguous() {
			panic(errorf("adam8bit_step", "%s: want %d contiguous f32 scales for %s", t.describe(), nb, p.describe()))
		}
	}
	device.Adam8bitStep(p.st.dev, p.view(), g.view(), m.view(), v.view(), mScale.view(), vScale.view(), h)
	for _, t := range []*Tensor{p, m, v, mScale, vScale} {
		t.st.version.Add(1)
	}
}
