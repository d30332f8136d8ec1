package device

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// NF4: QLoRA's 4-bit NormalFloat (Dettmers et al., "QLoRA: Efficient
// Finetuning of Quantized LLMs", 2023) as bitsandbytes stores it, so
// that a checkpoint a `load_in_4bit` model saved loads as it is
// (BitsandbytesNF4). Read from bitsandbytes-foundation/bitsandbytes at
// 95f9af3: bitsandbytes/functional.py (get_4bit_type, quantize_4bit with
// compress_statistics, quantize_blockwise, create_dynamic_map, QuantState)
// and bitsandbytes/backends/default/ops.py (the PyTorch definitions of
// quantize_4bit, dequantize_4bit, quantize_blockwise and
// dequantize_blockwise, which the CUDA kernels implement).
//
// A tensor of n elements is cut, in row-major order, into blocks of
// QuantBlock = 64. Each block keeps its absolute maximum a and one 4-bit
// code per element: the index of the NF4 level (sixteen quantiles of a
// normal distribution scaled to [-1, 1], NF4Levels) nearest x/a. Codes
// are packed two per byte, element 2i in the high nibble of byte i (an
// odd n pads the last low nibble with the code of 0, 7).
//
// Double quantization (bitsandbytes' compress_statistics): the absmaxes
// themselves are stored in 8 bits. Their mean c (the offset) is taken
// out, and a - c is quantized blockwise, NF4NestedBlock = 256 absmaxes per
// block, with bitsandbytes' signed 8-bit dynamic code (a 256-entry map of
// [-1, 1]), each nested block keeping its own F32 absmax s. So
//
//	a_b   = fl32(fl32(map[q_b]·s_{b/256}) + c)
//	value = fl32(level[code]·a_b)
//
// which is what bitsandbytes' dequantize_4bit computes, in F32, before it
// rounds to the weight's dtype; a product rounds the F32 value once to its
// compute type (BF16, F16; F32 as it is).
//
// Rounding of the codes is the PyTorch definition's: x·fl32(1/a) in F32
// (a clamped to at least 1e-38, so an all-zero block gets the code of 0),
// clamped to [-1, 1], then the number of midpoints between consecutive
// levels that lie strictly below it (torch.bucketize: a value exactly on
// a midpoint takes the lower level). A tensor whose length is not a
// multiple of the block size divides its last, partial block by its
// absmax instead, and stores that absmax clamped, as that definition
// does. The offset is the mean of the absmaxes summed in F64 and rounded
// once to F32 (PyTorch's F32 mean may differ from it in the last bit).
//
// Both tables travel with every tensor (1088 bytes), so a checkpoint's
// own quant_map and nested_quant_map are used exactly as stored, whatever
// PyTorch version computed them.
//
// Storage (NF4Layout), little-endian: the offset c (F32), the sixteen
// levels (F32), the 256-entry nested map (F32), the nested absmaxes s
// (F32, ⌈nb/256⌉), the absmax codes q (one byte per block, nb = ⌈n/64⌉),
// then the ⌈n/2⌉ code bytes.

// QuantBlock is the number of consecutive elements (in row-major order)
// that share one scale in the quantized weight formats (NF4, Int8).
const QuantBlock = 64

// NF4NestedBlock is the number of NF4 block absmaxes that share one F32
// scale in the double quantization.
const NF4NestedBlock = 256

// nf4Levels are bitsandbytes' NF4 code values (get_4bit_type("nf4"),
// create_normal_map(offset=0.9677083)), as F32.
var nf4Levels = [16]float32{
	-1.0,
	-0.6961928009986877,
	-0.5250730514526367,
	-0.39491748809814453,
	-0.28444138169288635,
	-0.18477343022823334,
	-0.09105003625154495,
	0.0,
	0.07958029955625534,
	0.16093020141124725,
	0.24611230194568634,
	0.33791524171829224,
	0.44070982933044434,
	0.5626170039176941,
	0.7229568362236023,
	1.0,
}

// NF4Levels returns the sixteen NF4 code values, in code order.
func NF4Levels() [16]float32 { return nf4Levels }

// DynamicMap returns bitsandbytes' signed 8-bit dynamic code
// (create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)):
// 256 sorted values of [-1, 1] with a decimal exponent and a linear
// fraction per decade, which the double quantization stores absmaxes in.
func DynamicMap() [256]float32 { return dynamicMap }

// dynamicMap is the map DynamicMap returns (quant4_map.go).
var dynamicMap = func() (m [256]float32) {
	for i, b := range dynamicMapBits {
		m[i] = math.Float32frombits(b)
	}
	return m
}()

// NF4Layout is where the parts of an NF4 tensor of N elements lie in its
// storage (byte offsets), and how many blocks and nested blocks it has.
type NF4Layout struct {
	N, Blocks, Nested int
}

// NF4LayoutOf returns the layout of an n-element NF4 tensor.
func NF4LayoutOf(n int) NF4Layout {
	nb := (n + QuantBlock - 1) / QuantBlock
	return NF4Layout{N: n, Blocks: nb, Nested: (nb + NF4NestedBlock - 1) / NF4NestedBlock}
}

// Byte offsets of the parts.
func (l NF4Layout) OffsetAt() int64 { return 0 }
func (l NF4Layout) LevelsAt() int64 { return 4 }
func (l NF4Layout) MapAt() int64    { return 4 + 4*16 }
func (l NF4Layout) NestedAt() int64 { return 4 + 4*16 + 4*256 }
func (l NF4Layout) AbsmaxAt() int64 { return l.NestedAt() + 4*int64(l.Nested) }
func (l NF4Layout) CodesAt() int64  { return l.AbsmaxAt() + int64(l.Blocks) }

// Bytes is the storage size.
func (l NF4Layout) Bytes() int64 { return l.CodesAt() + int64(l.N+1)/2 }

// NF4Bytes is the exact storage size of n elements in NF4: 1092 bytes of
// offset and tables, 4·⌈⌈n/64⌉/256⌉ of nested scales, ⌈n/64⌉ absmax codes
// and ⌈n/2⌉ code bytes: 0.5159 bytes (4.127 bits) per element at scale.
func NF4Bytes(n int) int64 { return NF4LayoutOf(n).Bytes() }

// NF4Parts is an NF4 tensor's content on the host, in its storage order.
type NF4Parts struct {
	Offset      float32
	Levels      [16]float32
	Map         [256]float32
	Nested      []float32 // one per NF4NestedBlock blocks
	AbsmaxCodes []byte    // one per block
	Codes       []byte    // ⌈n/2⌉, element 2i in the high nibble of byte i
}

// Absmax returns block b's dequantized absmax, fl32(fl32(map[q]·s) + c).
func (p *NF4Parts) Absmax(b int) float32 {
	return NF4Absmax(&p.Map, p.AbsmaxCodes[b], p.Nested[b/NF4NestedBlock], p.Offset)
}

// Value returns element i's dequantized value in F32.
func (p *NF4Parts) Value(i int) float32 {
	c := p.Codes[i/2]
	if i%2 == 0 {
		c >>= 4
	}
	return float32(p.Levels[c&15] * p.Absmax(i/QuantBlock))
}

// NF4Absmax is a block's absmax from its code q, its nested block's scale
// s and the tensor's offset c: fl32(fl32(m[q]·s) + c), each step rounded
// to F32 on its own (no fused multiply-add), as bitsandbytes'
// dequantize_blockwise followed by `absmax += offset` computes it.
func NF4Absmax(m *[256]float32, q byte, s, c float32) float32 {
	return float32(m[q]*s) + c
}

// floatKey maps a float32 to an int32 that orders as the values do (−0
// just below +0, which no bound lies between): the searches below compare
// keys, since Go compiles an integer comparison's result into a
// conditional move and a float comparison's into a branch, which a
// weight's codes make as unpredictable as branches get.
func floatKey(f float32) int32 {
	s := int32(math.Float32bits(f))
	return s ^ (s >> 31 & 0x7fffffff)
}

// boundKeys returns the keys of the midpoints between consecutive values
// of a sorted table, in F32 as the PyTorch definition forms them:
// (m[i] + m[i+1]) / 2; the entries past them are the largest key.
func boundKeys(m []float32, keys []int32) {
	for i := range keys {
		keys[i] = math.MaxInt32
		if i+1 < len(m) {
			keys[i] = floatKey(float32(m[i]+m[i+1]) / 2)
		}
	}
}

var (
	nf4Bounds     [16]int32  // NF4's 15 midpoints, then the largest key
	dynamicBounds [256]int32 // the dynamic map's 255, then the largest key
)

func init() {
	boundKeys(nf4Levels[:], nf4Bounds[:])
	boundKeys(dynamicMap[:], dynamicBounds[:])
}

// below is 1 when bound < k, else 0, without a branch.
func below(bound, k int32) int { return int(uint64(int64(bound)-int64(k)) >> 63) }

// nf4Code returns the number of NF4 midpoints strictly below y: its code
// (torch.bucketize; the bounds lie inside (-1, 1), so clamping y to
// [-1, 1] first would not change it). A binary search in arithmetic.
func nf4Code(y float32) byte {
	k, b := floatKey(y), &nf4Bounds
	i := below(b[7], k) << 3
	i += below(b[(i+3)&15], k) << 2
	i += below(b[(i+1)&15], k) << 1
	i += below(b[i&15], k)
	return byte(i)
}

// searchBounds returns the number of the 255 midpoints of b strictly
// below y, as nf4Code does for 15.
func searchBounds(b *[256]int32, y float32) byte {
	k := floatKey(y)
	i := 0
	for s := 7; s >= 0; s-- {
		i += below(b[(i+1<<s-1)&255], k) << s
	}
	return byte(i)
}

// minAbsmax is the PyTorch definition's clamp(min=1e-38) of a divisor.
const minAbsmax = float32(1e-38)

// NF4Encode quantizes x, whole blocks of QuantBlock elements except that
// the last may be partial when last is set (x then ends the tensor): it
// writes each block's absmax (F32, before the double quantization) and
// the ⌈len(x)/2⌉ code bytes. The first non-finite element is an error
// (its index in x), since no scale can represent it.
func NF4Encode(codes []byte, absmax []float32, x []float32, last bool) error {
	n := len(x)
	for b := 0; b*QuantBlock < n; b++ {
		lo, hi := b*QuantBlock, min((b+1)*QuantBlock, n)
		blk := x[lo:hi]
		a, err := blockAbsmax(blk)
		if err != nil {
			err.Index += lo
			return err
		}
		partial := hi-lo < QuantBlock
		if partial && !last {
			panic("device: NF4Encode: a partial block that is not the last")
		}
		r := float32(1) / max(a, minAbsmax)
		if partial {
			a = max(a, minAbsmax)
		}
		absmax[b] = a
		for i := 0; i < len(blk); i += 2 {
			var y0, y1 float32
			if partial {
				y0 = blk[i] / a
			} else {
				y0 = blk[i] * r
			}
			hiNib := nf4Code(y0)
			loNib := byte(7) // the code of 0 pads an odd tensor
			if i+1 < len(blk) {
				if partial {
					y1 = blk[i+1] / a
				} else {
					y1 = blk[i+1] * r
				}
				loNib = nf4Code(y1)
			}
			codes[(lo+i)/2] = hiNib<<4 | loNib
		}
	}
	return nil
}

// blockAbsmax returns the largest magnitude of x, or the first
// non-finite element. Magnitudes are compared as their bits, which order
// as the values do and put every NaN above the infinities, so one test
// per block finds both.
func blockAbsmax(x []float32) (float32, *NonFiniteError) {
	var m uint32
	for _, v := range x {
		m = max(m, math.Float32bits(v)&^(1<<31))
	}
	if m < 0x7f800000 {
		return math.Float32frombits(m), nil
	}
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return 0, &NonFiniteError{Index: i, Value: v}
		}
	}
	panic("unreachable")
}

// NonFiniteError reports an element that cannot be quantized.
type NonFiniteError struct {
	Index int
	Value float32
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("element %d is %v: a quantized block cannot hold a non-finite value", e.Index, e.Value)
}

// NF4Nest double-quantizes the block absmaxes a (all of a tensor's):
// it returns the offset (their mean, summed in F64, rounded once to F32)
// and writes q (one code per absmax) and nested (one F32 scale per
// NF4NestedBlock absmaxes), by the dynamic map m.
func NF4Nest(q []byte, nested []float32, a []float32, m *[256]float32) (offset float32) {
	if len(a) == 0 {
		return 0
	}
	// A compensated sum (Neumaier): the F64 sum of F32 values correctly
	// rounded in all but contrived cases, as math.fsum is exactly.
	var sum, comp float64
	for _, v := range a {
		x := float64(v)
		t := sum + x
		if math.Abs(sum) >= math.Abs(x) {
			comp += (sum - t) + x
		} else {
			comp += (x - t) + sum
		}
		sum = t
	}
	offset = float32((sum + comp) / float64(len(a)))
	bounds := &dynamicBounds
	if *m != dynamicMap {
		bounds = new([256]int32)
		boundKeys(m[:], bounds[:])
	}
	for b := 0; b*NF4NestedBlock < len(a); b++ {
		lo, hi := b*NF4NestedBlock, min((b+1)*NF4NestedBlock, len(a))
		var s float32
		for _, v := range a[lo:hi] {
			s = max(s, float32(math.Abs(float64(v-offset))))
		}
		partial := hi-lo < NF4NestedBlock
		r := float32(1) / max(s, minAbsmax)
		if partial {
			s = max(s, minAbsmax)
		}
		nested[b] = s
		for i, v := range a[lo:hi] {
			d := v - offset
			var y float32
			if partial {
				y = d / s
			} else {
				y = d * r
			}
			q[lo+i] = searchBounds(bounds, y)
		}
	}
	return offset
}

// QuantizeNF4 quantizes a whole tensor held on the host: the reference
// definition, which the devices' Quantize computes chunk by chunk (a long
// x is encoded in parts on several goroutines, each block on its own, so
// the result does not depend on them).
func QuantizeNF4(x []float32) (NF4Parts, error) {
	l := NF4LayoutOf(len(x))
	p := NF4Parts{Levels: nf4Levels, Map: dynamicMap, Nested: make([]float32, l.Nested),
		AbsmaxCodes: make([]byte, l.Blocks), Codes: make([]byte, (len(x)+1)/2)}
	a := make([]float32, l.Blocks)
	err := inParts(len(x), func(s, e int) error {
		return NF4Encode(p.Codes[s/2:(e+1)/2], a[s/QuantBlock:], x[s:e], e == len(x))
	})
	if err != nil {
		return NF4Parts{}, err
	}
	p.Offset = NF4Nest(p.AbsmaxCodes, p.Nested, a, &p.Map)
	return p, nil
}

// inParts runs encode over parts [s, e) of n elements (s a multiple of
// QuantBlock) on up to GOMAXPROCS goroutines when n is large, and
// returns the error of the lowest part that failed, its index made
// absolute.
func inParts(n int, encode func(s, e int) error) error {
	parts := min(runtime.GOMAXPROCS(0), n/(1<<18))
	if parts <= 1 {
		return encode(0, n)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		s := n * i / parts / QuantBlock * QuantBlock
		e := n * (i + 1) / parts / QuantBlock * QuantBlock
		if i == parts-1 {
			e = n
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := encode(s, e); err != nil {
				if nf, ok := err.(*NonFiniteError); ok {
					err = &NonFiniteError{Index: s + nf.Index, Value: nf.Value}
				}
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
