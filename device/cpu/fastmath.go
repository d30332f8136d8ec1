package cpu

import (
	"math"

	"github.com/memfit/memfit/device"
)

// Float32 elementwise math without going through float64 libm: exp by
// range reduction and a degree-7 polynomial (relative error below 3e-7,
// about one float32 ulp), and tanh and sigmoid from it. These are the
// transcendental functions of GELU, softmax and cross-entropy, which run
// over every activation.

const (
	expHi = 88.37626
	expLo = -87.33654
	log2e = 1.442695
	ln2Hi = 0.693359375
	ln2Lo = -2.12194440e-4
	expC1 = 1.0
	expC2 = 0.5
	expC3 = 0.16666665
	expC4 = 0.041666586
	expC5 = 0.008333598
	expC6 = 0.0013889148
	expC7 = 0.00019591706
	// roundMagic is 1.5·2²³: x + roundMagic rounds x to an integer held in
	// the low bits of the sum's mantissa (for |x| < 2²²).
	roundMagic = 12582912
)

// exp32 is e^x for float32.
func exp32(x float32) float32 {
	switch {
	case x > expHi:
		return float32(math.Inf(1))
	case x < expLo:
		if x != x {
			return x
		}
		return 0
	}
	t := x*log2e + 0.5
	k := int32(t)
	if float32(k) > t {
		k-- // floor, not truncation, for negative t
	}
	n := float32(k)
	r := x - n*ln2Hi - n*ln2Lo
	p := float32(expC7)
	p = p*r + expC6
	p = p*r + expC5
	p = p*r + expC4
	p = p*r + expC3
	p = p*r + expC2
	p = p*r + expC1
	p = p*r + 1
	return p * math.Float32frombits(uint32(k+127)<<23)
}

// tanh32 is tanh(x) for float32.
func tanh32(x float32) float32 {
	a := x
	if a < 0 {
		a = -a
	}
	if a < 0.625 {
		// Odd minimax polynomial: (1-e)/(1+e) would cancel here.
		z := x * x
		return ((((-5.70498872745e-3*z+2.06390887954e-2)*z-5.37397155531e-2)*z+1.33314422036e-1)*z-3.33332819422e-1)*z*x + x
	}
	if a > 9 {
		a = 1
	} else {
		e := exp32(-2 * a)
		a = (1 - e) / (1 + e)
	}
	if x < 0 {
		return -a
	}
	return a
}

// sigmoid32 is 1/(1+e^-x) for float32.
func sigmoid32(x float32) float32 { return 1 / (1 + exp32(-x)) }

// unaryRow32 computes the transcendental unary ops on float32 rows with
// the functions above; it reports false for ops it leaves to unaryRow.
func unaryRow32(op device.UnaryOp, y, x []float32) bool {
	x = x[:len(y)]
	switch op {
	case device.Exp:
		for i, v := range x {
			y[i] = exp32(v)
		}
	case device.Tanh:
		for i, v := range x {
			y[i] = tanh32(v)
		}
	case device.Sigmoid:
		for i, v := range x {
			y[i] = sigmoid32(v)
		}
	case device.Gelu:
		geluRow32(y, x)
	default:
		return false
	}
	return true
}

// geluGrad32 computes out = g·gelu'(x) on float32 rows.
func geluGrad32(out, x, g []float32) {
	x, g = x[:len(out)], g[:len(out)]
	start := geluGradVector(out, x, g)
	for i := start; i < len(x); i++ {
		v := x[i]
		u := geluC * (v + 0.044715*v*v*v)
		bits := math.Float32bits(u)
		a := math.Float32frombits(bits &^ (1 << 31))
		if a > 9 {
			a = 9
		}
		// Round -2a·log2(e) to the nearest integer n without int
		// conversions (which stall the loop): adding 1.5·2²³ leaves n in
		// the low mantissa bits.
		big := -2*a*log2e + roundMagic
		n := big - roundMagic
		r := -2*a - n*ln2Hi - n*ln2Lo
		p := ((((((expC7*r+expC6)*r+expC5)*r+expC4)*r+expC3)*r+expC2)*r+expC1)*r + 1
		e := p * math.Float32frombits((math.Float32bits(big)-math.Float32bits(roundMagic)+127)<<23)
		th := math.Float32frombits(math.Float32bits((1-e)/(1+e)) | bits&(1<<31))
		du := geluC * (1 + 3*0.044715*v*v)
		out[i] = g[i] * (0.5*(1+th) + 0.5*v*(1-th*th)*du)
	}
}

// geluRow32 is GELU with tanh written out inline and without branches, so
// that the processor overlaps the long dependency chains of neighbouring
// elements. GELU needs tanh only to absolute accuracy (it enters as
// 1+tanh), so one formula serves every input: tanh|u| = (1-e)/(1+e) with
// e = exp(-2|u|) from the same range reduction and polynomial as exp32,
// absolute error below 3e-7.
func geluRow32(y, x []float32) {
	x = x[:len(y)]
	start := geluVector(y, x)
	for i := start; i < len(x); i++ {
		v := x[i]
		// tanhAbsAccurate, written out: a call in this loop costs more
		// than the arithmetic.
		u := geluC * (v + 0.044715*v*v*v)
		bits := math.Float32bits(u)
		a := math.Float32frombits(bits &^ (1 << 31))
		if a > 9 {
			a = 9
		}
		// Round -2a·log2(e) to the nearest integer n without int
		// conversions (which stall the loop): adding 1.5·2²³ leaves n in
		// the low mantissa bits.
		big := -2*a*log2e + roundMagic
		n := big - roundMagic
		r := -2*a - n*ln2Hi - n*ln2Lo
		p := ((((((expC7*r+expC6)*r+expC5)*r+expC4)*r+expC3)*r+expC2)*r+expC1)*r + 1
		e := p * math.Float32frombits((math.Float32bits(big)-math.Float32bits(roundMagic)+127)<<23)
		th := math.Float32frombits(math.Float32bits((1-e)/(1+e)) | bits&(1<<31))
		y[i] = 0.5 * v * (1 + th)
	}
}

// tanhAbsAccurate is tanh to absolute accuracy 2e-7, branch-free.
func tanhAbsAccurate(u float32) float32 {
	bits := math.Float32bits(u)
	a := math.Float32frombits(bits &^ (1 << 31))
	a = min(a, 9)
	t := -2 * a * log2e // in [-26, 0]
	k := int32(t - 0.5) // t <= 0, so truncation rounds to nearest: |r| <= ln2/2
	n := float32(k)
	r := -2*a - n*ln2Hi - n*ln2Lo
	p := ((((((expC7*r+expC6)*r+expC5)*r+expC4)*r+expC3)*r+expC2)*r+expC1)*r + 1
	e := p * math.Float32frombits(uint32(k+127)<<23)
	th := (1 - e) / (1 + e)
	return math.Float32frombits(math.Float32bits(th) | bits&(1<<31))
}
