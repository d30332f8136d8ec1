package device

import (
	"math"
	"sync"
	"unsafe"
)

// 8-bit optimizer state (Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization", 2022, in a format of memfit's own). A moment tensor of n
// elements is stored as n one-byte codes (U8) and one F32 scale per block
// of Quant8Block elements, the block's absolute maximum: element i holds
// the value scale[i/Quant8Block] · Q(code[i]), where Q maps a code to
// [-1, 1] (first moment) or [0, 1] (second moment). The block's largest
// element is therefore exact, and every other is rounded to the nearest
// code relative to it.
//
// Q is a small floating-point format rather than a linear grid. Gradients
// within one block span several orders of magnitude, and their squares
// (Adam's second moment) twice as many: a linear map of 255 steps rounds
// every second moment below 1/510 of the block's largest to zero, and
// Adam then divides a non-zero first moment by ε alone. A float format
// keeps about the same relative precision at every magnitude down to its
// smallest exponent:
//
//   - first moment (signed): a sign bit and a 7-bit magnitude with 4
//     exponent and 3 mantissa bits ("E4M3", exponent bias 15, with
//     subnormals); magnitudes 2⁻¹⁷ … 1.875, divided by 1.875 so that
//     the largest code is exactly 1. Relative rounding error ≤ 1/16;
//     the smallest non-zero value is 4.1e-6 of the block's absmax.
//   - second moment (unsigned, ≥ 0): 5 exponent and 3 mantissa bits
//     ("E5M3", bias 31, with subnormals); magnitudes 2⁻³⁴ … 1.875,
//     divided by 1.875. Relative error ≤ 1/16 (≤ 1/32 in √v, which is
//     what the update divides by); smallest non-zero 3.1e-11 of the
//     absmax, below the square of the first moment's, so that an
//     element whose first moment survives rounding keeps its second.
//
// bitsandbytes' "dynamic" map makes the same trade with decimal exponents
// and a linear fraction per decade; a binary float format has the same
// precision profile and is rounded with integer operations on the bits of
// an F32 (no table search), which is what keeps the step fast. Rounding is
// to the nearest code, ties to the even code, computed on the value scaled
// by 1.875/absmax in F32.

// Quant8Block is the number of elements that share one scale.
const Quant8Block = 2048

// Quant8Bytes is the number of bytes one 8-bit moment of n elements
// occupies: n codes and ⌈n/Quant8Block⌉ F32 scales.
func Quant8Bytes(n int) int64 { return int64(n) + 4*int64(Quant8Blocks(n)) }

// Quant8Blocks is the number of blocks (scales) of an n-element moment.
func Quant8Blocks(n int) int { return (n + Quant8Block - 1) / Quant8Block }

const (
	// Multiplying a normalised magnitude in [0, 1] by these puts it, as an
	// F32, where its bits above bit 20 are the code: 1.875·2⁻¹¹² for E4M3
	// (F32 bias 127 - 15) and 1.875·2⁻⁹⁶ for E5M3 (127 - 31).
	quantSignedK   = 1.875 / (1 << 112)
	quantUnsignedK = 1.875 / (1 << 96)
)

// Dequantisation multiplies a code's magnitude, placed in the bits of an
// F32 (code<<20), by these F32 factors, 1/quantSignedK and
// 1/quantUnsignedK rounded to F32: one F32 product, which vector kernels
// compute bit for bit.
var (
	quantSignedDeq   = float32(1 / quantSignedK)
	quantUnsignedDeq = float32(1 / quantUnsignedK)
)

// Quant8DequantFactors returns the F32 factors dequantisation multiplies a
// first-moment (signed) and second-moment magnitude by, once the code's
// magnitude bits are placed at bit 20 of an F32: Q(c) = bits(c<<20)·factor,
// for vector kernels to compute the tables' values.
func Quant8DequantFactors() (signed, unsigned float32) { return quantSignedDeq, quantUnsignedDeq }

// The code tables: value of each code as a fraction of the block's absmax.
var quantSignedTable, quantUnsignedTable [256]float32

func init() {
	for c := range 256 {
		v := math.Float32frombits(uint32(c&0x7f)<<20) * quantSignedDeq
		if c&0x80 != 0 {
			v = -v
		}
		quantSignedTable[c] = v
		quantUnsignedTable[c] = math.Float32frombits(uint32(c)<<20) * quantUnsignedDeq
	}
}

// Quant8Signed returns the first-moment code nearest x, a value in
// [-1, 1] relative to its block's absmax (x·1.875·2⁻¹¹² is rounded).
func Quant8Signed(x float32) uint8 { return quantSigned(x * quantSignedK) }

// Quant8Unsigned returns the second-moment code nearest x in [0, 1].
func Quant8Unsigned(x float32) uint8 { return quantUnsigned(x * quantUnsignedK) }

// Quant8SignedValue is the value of first-moment code c, in [-1, 1].
func Quant8SignedValue(c uint8) float32 { return quantSignedTable[c] }

// Quant8UnsignedValue is the value of second-moment code c, in [0, 1].
func Quant8UnsignedValue(c uint8) float32 { return quantUnsignedTable[c] }

// quantSigned rounds y (already multiplied by quantSignedK/absmax) to a
// code: the F32 bits of |y| rounded to 3 mantissa bits, ties to even.
func quantSigned(y float32) uint8 {
	b := math.Float32bits(y)
	s := b >> 31
	b &^= 1 << 31
	r := (b + 0x7ffff + (b>>20)&1) >> 20
	r = min(r, 0x7f)
	if r == 0 {
		return 0 // one zero code: no negative zero
	}
	return uint8(r | s<<7)
}

// quantUnsigned rounds y ≥ 0 (multiplied by quantUnsignedK/absmax).
func quantUnsigned(y float32) uint8 {
	b := math.Float32bits(y) &^ (1 << 31)
	r := (b + 0x7ffff + (b>>20)&1) >> 20
	return uint8(min(r, 0xff))
}

// Adam8bitBlock applies the 8-bit Adam step to one block (at most
// Quant8Block elements): p and g are the block's parameter and gradient,
// m and v its codes, mScale and vScale its scales. It dequantises each
// moment, updates it as AdamStep does and updates the parameter with the
// new moments (so the step itself sees no rounding), then stores the
// moments again with the block's new absmax as scale. It computes in F32.
// It is the definition the fused kernels implement; the CPU device and
// the composed fallback call it. work holds at least 2·len(p) floats.
func Adam8bitBlock(p, g []float32, m, v []uint8, mScale, vScale *float32, h AdamHyper, work []float32) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	mw, vw := work[:n], work[n:2*n]
	c := NewAdam8bitConsts(h)
	sm, sv := *mScale, *vScale
	var am, av float32
	// Every product and sum is rounded to F32 on its own (the explicit
	// conversions forbid fused multiply-adds), in the order the vector
	// kernels compute them, so that they give these bits exactly.
	for i := range p {
		pi := p[i]
		gi := float32(g[i] * c.GradScale)
		gi = float32(gi + float32(c.WD*pi))
		mo := float32(quantSignedTable[m[i]] * sm)
		mi := float32(float32(c.Beta1*mo) + float32(c.OneMinusBeta1*gi))
		vo := float32(quantUnsignedTable[v[i]] * sv)
		vi := float32(float32(c.Beta2*vo) + float32(float32(c.OneMinusBeta2*gi)*gi))
		den := float32(float32(float32(math.Sqrt(float64(vi)))*c.InvSqrtBC2) + c.Eps)
		step := float32(float32(c.StepSize*mi) / den)
		p[i] = float32(float32(pi*c.Decay) - step)
		mw[i], vw[i] = mi, vi
		am = max(am, float32(math.Abs(float64(mi))))
		av = max(av, vi)
	}
	*mScale, *vScale = am, av
	km, kv := Quant8Factors(am, av)
	Quant8Store(m, v, mw, vw, km, kv)
}

// Quant8Store writes the codes of moments mw and vw, given the factors
// km = 1.875·2⁻¹¹²/absmax and kv = 1.875·2⁻⁹⁶/absmax (0 for an all-zero
// block): the second pass of Adam8bitBlock.
func Quant8Store(m, v []uint8, mw, vw []float32, km, kv float32) {
	for i := range m {
		m[i] = quantSigned(float32(mw[i] * km))
		v[i] = quantUnsigned(float32(vw[i] * kv))
	}
}

// Quant8Factors returns the factors Quant8Store takes for blocks whose
// moments have absmax am and av.
func Quant8Factors(am, av float32) (km, kv float32) {
	if am > 0 {
		km = quantSignedK / am
	}
	if av > 0 {
		kv = quantUnsignedK / av
	}
	return km, kv
}

// Adam8bitConsts are an AdamHyper as the F32 arithmetic of the 8-bit
// step uses them. The field order is a layout: vector kernels read the
// struct as ten consecutive float32s.
type Adam8bitConsts struct {
	GradScale, WD, Decay                       float32
	Beta1, OneMinusBeta1, Beta2, OneMinusBeta2 float32
	StepSize, InvSqrtBC2, Eps                  float32
}

// NewAdam8bitConsts converts h (GradScale 0 read as 1; WD is Adam's L2
// term, Decay AdamW's 1 - lr·wd).
func NewAdam8bitConsts(h AdamHyper) Adam8bitConsts {
	scale := h.GradScale
	if scale == 0 {
		scale = 1
	}
	c := Adam8bitConsts{
		GradScale: float32(scale), Decay: 1,
		Beta1: float32(h.Beta1), OneMinusBeta1: float32(1 - h.Beta1),
		Beta2: float32(h.Beta2), OneMinusBeta2: float32(1 - h.Beta2),
		StepSize: float32(h.LR / h.BiasCorrection1), InvSqrtBC2: float32(1 / math.Sqrt(h.BiasCorrection2)),
		Eps: float32(h.Eps),
	}
	if h.WeightDecay != 0 {
		if h.Decoupled {
			c.Decay = float32(1 - h.LR*h.WeightDecay)
		} else {
			c.WD = float32(h.WeightDecay)
		}
	}
	return c
}

// hostChunk is the host memory the composed 8-bit step stages one group
// of blocks in; pooled, so a step makes no Go-heap garbage per call.
type hostChunk struct {
	pb, gb, sb   []byte // parameter, gradient (F32 bytes), scales
	m, v         []uint8
	p, g, ms, vs []float32
	work         []float32
}

const chunkBlocks = 16

var hostChunks = sync.Pool{New: func() any {
	n := chunkBlocks * Quant8Block
	c := &hostChunk{pb: make([]byte, 4*n), gb: make([]byte, 4*n), sb: make([]byte, 8*chunkBlocks),
		m: make([]uint8, n), v: make([]uint8, n), work: make([]float32, 2*Quant8Block)}
	c.p = f32View(c.pb)
	c.g = f32View(c.gb)
	c.ms, c.vs = f32View(c.sb[:4*chunkBlocks]), f32View(c.sb[4*chunkBlocks:])
	return c
}}

// f32View reinterprets little-endian bytes as float32s (memfit runs on
// little-endian hosts only; see tensor's writeElems).
func f32View(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// composedAdam8bitStep runs Adam8bitBlock on the host: groups of blocks
// are read from the device, stepped and written back. It needs no device
// temporaries (so its accounting is that of the fused kernel: none) and
// gives the CPU kernel's bits exactly; on a device whose memory the host
// cannot address it costs two copies of the state and parameter per step.
func composedAdam8bitStep(d Device, param, grad, m, v, mScale, vScale View, h AdamHyper) {
	n := param.Len()
	c := hostChunks.Get().(*hostChunk)
	defer hostChunks.Put(c)
	nb := Quant8Blocks(n)
	for b0 := 0; b0 < nb; b0 += chunkBlocks {
		b1 := min(b0+chunkBlocks, nb)
		lo, hi := b0*Quant8Block, min(b1*Quant8Block, n)
		k := hi - lo
		d.Read(c.pb[:4*k], param.Buf, int64(4*(param.Offset+lo)))
		d.Read(c.gb[:4*k], grad.Buf, int64(4*(grad.Offset+lo)))
		d.Read(c.m[:k], m.Buf, int64(m.Offset+lo))
		d.Read(c.v[:k], v.Buf, int64(v.Offset+lo))
		d.Read(c.sb[:4*(b1-b0)], mScale.Buf, int64(4*(mScale.Offset+b0)))
		d.Read(c.sb[4*chunkBlocks:4*chunkBlocks+4*(b1-b0)], vScale.Buf, int64(4*(vScale.Offset+b0)))
		for b := b0; b < b1; b++ {
			s, e := b*Quant8Block-lo, min((b+1)*Quant8Block, n)-lo
			Adam8bitBlock(c.p[s:e], c.g[s:e], c.m[s:e], c.v[s:e], &c.ms[b-b0], &c.vs[b-b0], h, c.work)
		}
		d.Write(param.Buf, int64(4*(param.Offset+lo)), c.pb[:4*k])
		d.Write(m.Buf, int64(m.Offset+lo), c.m[:k])
		d.Write(v.Buf, int64(v.Offset+lo), c.v[:k])
		d.Write(mScale.Buf, int64(4*(mScale.Offset+b0)), c.sb[:4*(b1-b0)])
		d.Write(vScale.Buf, int64(4*(vScale.Offset+b0)), c.sb[4*chunkBlocks:4*chunkBlocks+4*(b1-b0)])
	}
}
