package cpu

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// format describes a 16-bit IEEE-style float: sign, exp bits, mantissa bits.
type format struct {
	name    string
	expBits uint
	manBits uint
	toF32   func(uint16) float32
	fromF32 func(float32) uint16
}

var formats = []format{
	{"f16", 5, 10, F32FromF16, F16FromF32},
	{"bf16", 8, 7, F32FromBF16, BF16FromF32},
}

// decode is the IEEE definition of a bit pattern's value, written from the
// definition rather than by bit shuffling.
func (f format) decode(h uint16) float64 {
	sign := 1.0
	if h>>15 == 1 {
		sign = -1
	}
	e := int(h>>f.manBits) & (1<<f.expBits - 1)
	m := float64(h & (1<<f.manBits - 1))
	bias := 1<<(f.expBits-1) - 1
	switch {
	case e == 1<<f.expBits-1 && m == 0:
		return sign * math.Inf(1)
	case e == 1<<f.expBits-1:
		return math.NaN()
	case e == 0:
		return sign * math.Ldexp(m, 1-bias-int(f.manBits))
	}
	return sign * math.Ldexp(1+m/float64(uint(1)<<f.manBits), e-bias)
}

func TestWideningAllPatterns(t *testing.T) {
	for _, f := range formats {
		for h := 0; h < 1<<16; h++ {
			want, got := f.decode(uint16(h)), float64(f.toF32(uint16(h)))
			if math.IsNaN(want) != math.IsNaN(got) || (!math.IsNaN(want) && want != got) {
				t.Fatalf("%s %#04x: got %v, want %v", f.name, h, got, want)
			}
		}
	}
}

// nearest rounds x to f by the IEEE rule: the nearest representable value,
// ties to the even significand, overflow to infinity past the largest
// finite value plus half an ulp.
func (f format) nearest(x float64, finite []float64, bits []uint16) uint16 {
	neg := math.Signbit(x)
	ax := math.Abs(x)
	i := sort.SearchFloat64s(finite, ax)
	var h uint16
	switch {
	case i == len(finite):
		maxv := finite[len(finite)-1]
		ulp := maxv - finite[len(finite)-2]
		if ax >= maxv+ulp/2 {
			h = uint16((1<<f.expBits - 1) << f.manBits) // inf
		} else {
			h = bits[len(bits)-1]
		}
	case finite[i] == ax:
		h = bits[i]
	default:
		lo, hi := finite[i-1], finite[i]
		switch {
		case ax-lo < hi-ax:
			h = bits[i-1]
		case ax-lo > hi-ax:
			h = bits[i]
		case bits[i-1]&1 == 0:
			h = bits[i-1]
		default:
			h = bits[i]
		}
	}
	if neg {
		h |= 1 << 15
	}
	return h
}

func TestNarrowingMatchesIEEE(t *testing.T) {
	for _, f := range formats {
		var finite []float64
		var bits []uint16
		for h := 0; h < 1<<15; h++ {
			if v := f.decode(uint16(h)); !math.IsInf(v, 0) && !math.IsNaN(v) {
				finite = append(finite, v)
				bits = append(bits, uint16(h))
			}
		}
		var inputs []float32
		for i, v := range finite {
			inputs = append(inputs, float32(v))
			if i+1 < len(finite) {
				mid := float32((v + finite[i+1]) / 2) // a tie (exact in f32)
				inputs = append(inputs, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))))
			}
		}
		inputs = append(inputs, math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-45, 65504, 65520, 65519.99, 1e38, 3.4e38, 0)
		for _, x := range inputs {
			for _, v := range []float32{x, -x} {
				want := f.nearest(float64(v), finite, bits)
				if got := f.fromF32(v); got != want {
					t.Fatalf("%s(%g = %#08x): got %#04x, want %#04x", f.name, v, math.Float32bits(v), got, want)
				}
			}
		}
		// NaN stays NaN, infinities stay infinite.
		if h := f.fromF32(float32(math.NaN())); !math.IsNaN(f.decode(h)) {
			t.Errorf("%s(NaN) = %#04x", f.name, h)
		}
		if h := f.fromF32(float32(math.Inf(-1))); !math.IsInf(f.decode(h), -1) {
			t.Errorf("%s(-inf) = %#04x", f.name, h)
		}
	}
}

// The vector converters agree bit for bit with the scalar ones, which the
// tests above check against the IEEE definition.
func TestVectorBF16Conversions(t *testing.T) {
	var src []float32
	for b := uint64(0); b < 1<<32; b += 4099 {
		src = append(src, math.Float32frombits(uint32(b)))
	}
	for h := 0; h < 1<<16; h++ { // every tie and its neighbours
		base := uint32(h) << 16
		src = append(src, math.Float32frombits(base|0x8000), math.Float32frombits(base|0x7fff), math.Float32frombits(base|0x8001))
	}
	src = append(src, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00001))
	for len(src)%16 != 5 {
		src = append(src, 1.5) // leave a scalar tail too
	}
	dst := make([]uint16, len(src))
	n := bf16FromF32Vector(dst, src)
	if hasAVX512 && n == 0 {
		t.Fatal("the vector path did not run")
	}
	for i := n; i < len(src); i++ {
		dst[i] = BF16FromF32(src[i])
	}
	for i, f := range src {
		if want := BF16FromF32(f); dst[i] != want {
			t.Fatalf("bf16(%#08x): vector %#04x, scalar %#04x", math.Float32bits(f), dst[i], want)
		}
	}
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	wide := make([]float32, len(all))
	for i := f32FromBF16Vector(wide, all); i < len(all); i++ {
		wide[i] = F32FromBF16(all[i]) // no vector path on this platform
	}
	for i, h := range all {
		if math.Float32bits(wide[i]) != math.Float32bits(F32FromBF16(h)) {
			t.Fatalf("f32(%#04x): vector %#08x", h, math.Float32bits(wide[i]))
		}
	}
}

// Narrowing a float64 rounds once, from the float64 value. The inputs sit
// just beside every halfway point, closer than float32 can resolve: a
// conversion through float32 lands them on the tie and rounds to even,
// half of them the wrong way.
func TestNarrowingFromF64RoundsOnce(t *testing.T) {
	fromF64 := map[string]func(float64) uint16{"f16": F16FromF64, "bf16": BF16FromF64}
	for _, f := range formats {
		conv := fromF64[f.name]
		var finite []float64
		var bits []uint16
		for h := 0; h < 1<<15; h++ {
			if v := f.decode(uint16(h)); !math.IsInf(v, 0) && !math.IsNaN(v) {
				finite = append(finite, v)
				bits = append(bits, uint16(h))
			}
		}
		var inputs []float64
		for i, v := range finite {
			inputs = append(inputs, v)
			if i+1 < len(finite) {
				mid := (v + finite[i+1]) / 2
				off := (finite[i+1] - v) * 0x1p-30
				inputs = append(inputs, mid, mid-off, mid+off)
			}
		}
		inputs = append(inputs, math.MaxFloat64, math.MaxFloat32, 1e300, 1e-300, math.SmallestNonzeroFloat64, 0)
		for _, x := range inputs {
			for _, v := range []float64{x, -x} {
				want := f.nearest(v, finite, bits)
				if got := conv(v); got != want {
					t.Fatalf("%s(%.17g): got %#04x, want %#04x", f.name, v, got, want)
				}
			}
		}
		if h := conv(math.NaN()); !math.IsNaN(f.decode(h)) {
			t.Errorf("%s(NaN) = %#04x", f.name, h)
		}
		if h := conv(math.Inf(-1)); !math.IsInf(f.decode(h), -1) {
			t.Errorf("%s(-inf) = %#04x", f.name, h)
		}
	}
	// The hand-derived case: 1 + 2⁻⁸ + 2⁻³⁰ is above bf16's halfway point
	// between 1 and 1 + 2⁻⁷, so it rounds up; in float32 it is the tie
	// 1 + 2⁻⁸, which rounds to even (1).
	if got := BF16FromF64(1 + 0x1p-8 + 0x1p-30); got != 0x3f81 {
		t.Errorf("BF16FromF64(1+2^-8+2^-30) = %#04x, want 0x3f81", got)
	}
	if got := F16FromF64(-(1 + 0x1p-11 + 0x1p-30)); got != 0xbc01 {
		t.Errorf("F16FromF64(-(1+2^-11+2^-30)) = %#04x, want 0xbc01", got)
	}
}

// BF16FromF64 rounds the bits of a float64 whose result is a normal
// bfloat16 directly: the same bits as through float32 rounded to odd, for
// float64s of every exponent and sign, mantissas at and around the
// halfway points, and the edges of the direct path (the smallest normal
// bfloat16 and the largest, where rounding carries into infinity).
func TestBF16FromF64Direct(t *testing.T) {
	viaF32 := func(f float64) uint16 { return BF16FromF32(f32Odd(f)) }
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(b uint64) {
		f := math.Float64frombits(b)
		if got, want := BF16FromF64(f), viaF32(f); got != want {
			t.Fatalf("BF16FromF64(%#016x = %g) = %#04x, through float32 %#04x", b, f, got, want)
		}
	}
	for range 1 << 20 {
		check(rng.Uint64())
	}
	half := uint64(1) << 44 // the cut bits' halfway point
	for e := uint64(0); e < 2048; e++ {
		for _, m := range []uint64{0, 1, half - 1, half, half + 1, 3 * half, 1<<45 - 1, 1<<52 - 1, 1<<52 - half, rng.Uint64() & (1<<52 - 1)} {
			for _, s := range []uint64{0, 1 << 63} {
				check(s | e<<52 | m)
			}
		}
	}
}
