package device

// Int8: memfit's blockwise 8-bit weight format. A tensor of n elements is
// cut, in row-major order, into blocks of QuantBlock = 64; each block
// keeps its absolute maximum a (F32) and one signed code per element,
//
//	code  = clamp(roundHalfEven(fl32(x · fl32(127/a))), -127, 127)
//	value = fl32(code · fl32(a/127))
//
// (a block of zeros has a = 0 and codes 0). It is the linear
// counterpart of NF4 (bitsandbytes' int8 vector-wise format scales rows
// the same way, torch.round(A · (127/absmax))): twice the bytes, with
// the rounding error uniform at a/254 per element rather than shaped to
// a normal distribution. Storage (Int8Layout): the ⌈n/64⌉ absmaxes (F32,
// little-endian), then the n codes (two's complement bytes).

// Int8Layout is where the parts of an Int8 tensor of N elements lie.
type Int8Layout struct {
	N, Blocks int
}

// Int8LayoutOf returns the layout of an n-element Int8 tensor.
func Int8LayoutOf(n int) Int8Layout {
	return Int8Layout{N: n, Blocks: (n + QuantBlock - 1) / QuantBlock}
}

// AbsmaxAt and CodesAt are the parts' byte offsets.
func (l Int8Layout) AbsmaxAt() int64 { return 0 }
func (l Int8Layout) CodesAt() int64  { return 4 * int64(l.Blocks) }

// Bytes is the storage size.
func (l Int8Layout) Bytes() int64 { return l.CodesAt() + int64(l.N) }

// Int8Bytes is the exact storage size of n elements in Int8: n codes and
// 4·⌈n/64⌉ bytes of scales, 1.0625 bytes per element at scale.
func Int8Bytes(n int) int64 { return Int8LayoutOf(n).Bytes() }

// Int8Step is the value of one code step in a block of absmax a,
// fl32(a/127).
func Int8Step(a float32) float32 { return a / 127 }

// Int8Encode quantizes x (whole blocks, but for the tensor's last) into
// codes and one absmax per block; the first non-finite element is an
// error.
func Int8Encode(codes []int8, absmax []float32, x []float32) error {
	n := len(x)
	for b := 0; b*QuantBlock < n; b++ {
		lo, hi := b*QuantBlock, min((b+1)*QuantBlock, n)
		a, err := blockAbsmax(x[lo:hi])
		if err != nil {
			err.Index += lo
			return err
		}
		absmax[b] = a
		if a == 0 {
			clear(codes[lo:hi])
			continue
		}
		r := float32(127) / a
		for i, v := range x[lo:hi] {
			// |v·r| <= 127.5: adding and taking away 1.5·2²³ in F32
			// rounds it to an integer, nearest even.
			y := float32(v*r) + 0x1.8p23
			y -= 0x1.8p23
			codes[lo+i] = int8(min(max(y, -127), 127))
		}
	}
	return nil
}

// Int8Parts is an Int8 tensor's content on the host.
type Int8Parts struct {
	Absmax []float32
	Codes  []int8
}

// Value returns element i's dequantized value in F32.
func (p *Int8Parts) Value(i int) float32 {
	return float32(float32(p.Codes[i]) * Int8Step(p.Absmax[i/QuantBlock]))
}

// QuantizeInt8 quantizes a whole tensor held on the host: the reference
// definition, which the devices' Quantize computes chunk by chunk (in
// parts on several goroutines when x is long, as QuantizeNF4).
func QuantizeInt8(x []float32) (Int8Parts, error) {
	l := Int8LayoutOf(len(x))
	p := Int8Parts{Absmax: make([]float32, l.Blocks), Codes: make([]int8, len(x))}
	err := inParts(len(x), func(s, e int) error {
		return Int8Encode(p.Codes[s:e], p.Absmax[s/QuantBlock:], x[s:e])
	})
	if err != nil {
		return Int8Parts{}, err
	}
	return p, nil
}
