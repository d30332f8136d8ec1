package cpu

import (
	"math"

	"github.com/memfit/memfit/device"
)

// AdamStep applies one Adam or AdamW update in place.
func (d *Device) AdamStep(param, grad, m, v device.View, h device.AdamHyper) {
	if wide(param) {
		adamStep[float64](d, param, grad, m, v, h)
		return
	}
	adamStep[float32](d, param, grad, m, v, h)
}

func adamStep[T float](d *Device, param, grad, m, v device.View, h device.AdamHyper) {
	n := param.Len()
	scale := h.GradScale
	if scale == 0 {
		scale = 1
	}
	stepSize := h.LR / h.BiasCorrection1
	sqrtBC2 := math.Sqrt(h.BiasCorrection2)
	vc := adamConsts{
		gradScale: float32(scale), beta1: float32(h.Beta1), oneMinusBeta1: float32(1 - h.Beta1),
		beta2: float32(h.Beta2), oneMinusBeta2: float32(1 - h.Beta2),
		stepSize: float32(stepSize), invSqrtBC2: float32(1 / sqrtBC2), eps: float32(h.Eps), decay: 1,
	}
	if h.WeightDecay != 0 {
		if h.Decoupled {
			vc.decay = float32(1 - h.LR*h.WeightDecay)
		} else {
			vc.wd = float32(h.WeightDecay)
		}
	}
	parallelRange(d.threads, n, func(s, e int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		for c := s; c < e; c += chunk {
			k := min(chunk, e-c)
			p := load(param, param.Offset+c, k, 1, sc.a[:])
			g := load(grad, grad.Offset+c, k, 1, sc.b[:])
			mm := load(m, m.Offset+c, k, 1, sc.c[:])
			vv := load(v, v.Offset+c, k, 1, sc.d[:])
			start := 0
			if p32, ok := any(p).([]float32); ok {
				start = adamVector(p32, any(g).([]float32), any(mm).([]float32), any(vv).([]float32), &vc)
			}
			for i := start; i < len(p); i++ {
				gi := float64(g[i]) * scale
				pi := float64(p[i])
				if h.WeightDecay != 0 {
					if h.Decoupled {
						pi -= h.LR * h.WeightDecay * pi
					} else {
						gi += h.WeightDecay * pi
					}
				}
				mi := h.Beta1*float64(mm[i]) + (1-h.Beta1)*gi
				vi := h.Beta2*float64(vv[i]) + (1-h.Beta2)*gi*gi
				pi -= stepSize * mi / (math.Sqrt(vi)/sqrtBC2 + h.Eps)
				p[i], mm[i], vv[i] = T(pi), T(mi), T(vi)
			}
			store(param, param.Offset+c, 1, p)
			store(m, m.Offset+c, 1, mm)
			store(v, v.Offset+c, 1, vv)
		}
	})
}

// SGDStep applies one SGD update in place.
func (d *Device) SGDStep(param, grad, momentum device.View, h device.SGDHyper) {
	if wide(param) {
		sgdStep[float64](d, param, grad, momentum, h)
		return
	}
	sgdStep[float32](d, param, grad, momentum, h)
}

func sgdStep[T float](d *Device, param, grad, buf device.View, h device.SGDHyper) {
	n := param.Len()
	scale := h.GradScale
	if scale == 0 {
		scale = 1
	}
	parallelRange(d.threads, n, func(s, e int) {
		sc := getScratch[T]()
		defer putScratch(sc)
		for c := s; c < e; c += chunk {
			k := min(chunk, e-c)
			p := load(param, param.Offset+c, k, 1, sc.a[:])
			g := load(grad, grad.Offset+c, k, 1, sc.b[:])
			var b []T
			if h.Momentum != 0 {
				b = load(buf, buf.Offset+c, k, 1, sc.c[:])
			}
			for i := range p {
				gi := float64(g[i])*scale + h.WeightDecay*float64(p[i])
				if h.Momentum != 0 {
					bi := gi
					if !h.FirstStep {
						bi = h.Momentum*float64(b[i]) + (1-h.Dampening)*gi
					}
					b[i] = T(bi)
					if h.Nesterov {
						gi += h.Momentum * bi
					} else {
						gi = bi
					}
				}
				p[i] = T(float64(p[i]) - h.LR*gi)
			}
			store(param, param.Offset+c, 1, p)
			if h.Momentum != 0 {
				store(buf, buf.Offset+c, 1, b)
			}
		}
	})
}

// AdamSteps is device.AdamGroupStepper: AdamStep on each parameter in
// turn (each is spread over the device's threads already, and the CPU
// has no launch cost to save).
func (d *Device) AdamSteps(params, grads, ms, vs []device.View, h device.AdamHyper) {
	for i := range params {
		d.AdamStep(params[i], grads[i], ms[i], vs[i], h)
	}
}

var _ device.AdamGroupStepper = (*Device)(nil)
