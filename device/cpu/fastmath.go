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

// GELU here is the tanh approximation written as a sigmoid: 0.5·v·(1 +
// tanh u) = v·σ(2u) = v/(1 + e^w) with w = -2u = v·(geluM2C + geluM2K·v²).
// One exp and one division, no cancellation in 1 + tanh u for negative v
// (the result keeps float32's relative accuracy there), and the same
// formula for every input, so the vector kernels (gelu_amd64.s) have no
// branches. w is clamped to [geluWMin, geluWMax]: e stays a normal float
// and 1+e finite, which moves the result by less than float32 can show.
const (
	geluM2C  = -2 * geluC
	geluM2K  = -2 * 0.044715 * geluC
	geluWMin = -87
	geluWMax = 88
)

// geluExpW returns e^w for GELU's w at v, as the vector kernels compute
// it: n = round(w·log2 e) by adding 1.5·2²³ (no int conversions, which
// stall the loop), r = w - n·ln2 and exp32's polynomial.
func geluExpW(v float32) float32 {
	w := v * (geluM2C + geluM2K*v*v)
	w = min(max(w, geluWMin), geluWMax)
	big := w*log2e + roundMagic
	n := big - roundMagic
	r := w - n*ln2Hi - n*ln2Lo
	p := ((((((expC7*r+expC6)*r+expC5)*r+expC4)*r+expC3)*r+expC2)*r+expC1)*r + 1
	return p * math.Float32frombits((math.Float32bits(big)-math.Float32bits(roundMagic)+127)<<23)
}

// geluGrad32 computes out = g·gelu'(x) on float32 rows: with s = σ(2u) =
// 1/(1+e) and σ' = σ²·e, gelu'(v) = s·(1 + v·s·e·d(2u)/dv).
func geluGrad32(out, x, g []float32) {
	x, g = x[:len(out)], g[:len(out)]
	start := geluGradVector(out, x, g)
	for i := start; i < len(x); i++ {
		v := x[i]
		e := geluExpW(v)
		s := 1 / (1 + e)
		out[i] = g[i] * (s * (1 + v*s*e*(2*geluC+6*0.044715*geluC*v*v)))
	}
}

// geluRow32 computes y = gelu(x) on float32 rows.
func geluRow32(y, x []float32) {
	x = x[:len(y)]
	start := geluVector(y, x)
	for i := start; i < len(x); i++ {
		v := x[i]
		y[i] = v / (1 + geluExpW(v))
	}
}
