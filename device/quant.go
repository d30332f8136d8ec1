package device

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/x448/float16"

	"github.com/memfit/memfit/internal/plantrace"
)

// Quantized frozen weights (NF4, Int8; quant4.go, quantint8.go) meet the
// devices in three places:
//
//   - QuantGemm, a product whose B is a quantized matrix: the capability
//     "quant_gemm" (the CPU dequantizes inside its GEMM's packing, so no
//     dequantized copy of the weight exists), or the composition below,
//     which dequantizes B a tile of columns of op(B) at a time into an
//     allocator temporary of the product's dtype (at most QuantTileElems
//     elements) and runs the device's Gemm on it (the CUDA device: a
//     dequantizing kernel and cuBLAS).
//   - Dequantize, a rectangle of a quantized matrix into a float dtype:
//     the capability "dequantize" (CPU, CUDA), or a host path through
//     Read and Write.
//   - Quantize, a float tensor into a quantized one (loading, freezing):
//     an optional interface (Quantizer), not a capability, since it takes
//     no device memory either way (the CPU quantizes in place; the CUDA
//     device in its kernels; the meta device does nothing; other devices
//     go through the host a chunk at a time).
//
// A quantized View is always a whole tensor's storage (Offset 0) with its
// shape; a matrix is its last dimension by the product of the others.

// Capability names of the quantized kernels.
const (
	CapQuantGemm  = "quant_gemm"
	CapDequantize = "dequantize"
)

// QuantGemmer computes products whose B is quantized.
type QuantGemmer interface {
	// QuantGemm is Gemm with B a quantized matrix (NF4 or Int8, the whole
	// tensor, LDB its row length, StrideB 0), dequantized to A's dtype
	// (each value rounded once from its F32 definition) as it is read.
	// A is F32, F64, F16 or BF16; C is A's dtype or F32.
	QuantGemm(g Gemm)
}

// Dequantizer writes dequantized values of a quantized matrix.
type Dequantizer interface {
	// Dequantize writes rows [r0, r1) × columns [c0, c1) of the quantized
	// matrix src into dst, contiguous [r1-r0, c1-c0] of a float dtype, each
	// value its F32 definition rounded once to dst's dtype.
	Dequantize(dst, src View, r0, r1, c0, c1 int)
}

// Quantizer quantizes on the device (found with As).
type Quantizer interface {
	// Quantize writes the quantized form of src (a contiguous float view)
	// into dst (a quantized tensor's whole storage of the same length), or
	// returns a *NonFiniteError naming src's element that cannot be
	// quantized, having written nothing useful.
	Quantize(dst, src View) error
}

// QuantTileElems bounds the temporary of the composed QuantGemm: op(B)
// is dequantized in tiles of whole columns, at most this many elements
// each (8 MiB in BF16) unless one column is longer.
const QuantTileElems = 1 << 22

// QuantMatrix returns the rows and columns of a quantized view read as a
// matrix: its last dimension, and the product of the others.
func QuantMatrix(v View) (rows, cols int) {
	if len(v.Shape) == 0 {
		return 1, 1
	}
	cols = v.Shape[len(v.Shape)-1]
	if cols == 0 {
		return 0, 0
	}
	return v.Len() / cols, cols
}

// QuantGemm runs a product whose B is quantized: d's fused kernel, or B
// dequantized a tile at a time into a temporary and d's Gemm.
func QuantGemm(d Device, g Gemm) {
	CheckQuantGemm(g)
	if k, ok := capable(d, CapQuantGemm).(QuantGemmer); ok {
		k.QuantGemm(g)
		return
	}
	composedQuantGemm(d, g)
}

// CheckQuantGemm panics unless g is a product QuantGemm computes.
func CheckQuantGemm(g Gemm) {
	rows, cols := QuantMatrix(g.B)
	kn := [2]int{g.K, g.N}
	if g.TransB {
		kn = [2]int{g.N, g.K}
	}
	switch {
	case !g.B.DType.IsQuantized():
		panic("device: QuantGemm: B is " + g.B.DType.String())
	case g.A.DType != F32 && g.A.DType != F64 && !g.A.DType.IsLowPrecision():
		panic("device: QuantGemm: A is " + g.A.DType.String())
	case g.C.DType != g.A.DType && g.C.DType != F32 || g.A.DType == F64 && g.C.DType != F64:
		panic("device: QuantGemm: C is " + g.C.DType.String() + " for A " + g.A.DType.String())
	case g.B.Offset != 0 || g.StrideB != 0 || g.OuterStrideB != 0 || g.LDB != cols || kn != [2]int{rows, cols}:
		panic(fmt.Sprintf("device: QuantGemm: B must be a whole %d×%d quantized matrix read with LDB %d, not at offset %d (strides %d, %d) with LDB %d as %v",
			rows, cols, cols, g.B.Offset, g.StrideB, g.OuterStrideB, g.LDB, kn))
	case g.Triangle != Full:
		panic("device: QuantGemm: no triangle")
	}
}

// composedQuantGemm dequantizes op(B) a tile of columns at a time into a
// temporary of A's dtype and runs Gemm on it: columns j0… of op(B) are
// rows j0… of B when TransB (a Linear's x·Wᵀ) and columns j0… of B
// otherwise (its input gradient, dy·W). Each tile's product writes
// columns j0… of C, so a 16-bit C is rounded once, as the fused product
// rounds it.
func composedQuantGemm(d Device, g Gemm) {
	if g.Batch == 0 || g.M == 0 || g.N == 0 {
		return
	}
	if g.K == 0 {
		// Nothing to dequantize: C = bias or beta·C.
		g.B = View{Buf: g.A.Buf, DType: g.A.DType}
		g.LDB = max(g.N, 1)
		if g.TransB {
			g.LDB = 1
		}
		d.Gemm(g)
		return
	}
	tn := min(g.N, max(1, QuantTileElems/g.K))
	s := scratch{d: d}
	defer s.free()
	tile := s.view(g.A.DType, tn*g.K)
	last := (g.N - 1) / tn * tn
	for j0 := 0; j0 < g.N; j0 += tn {
		if j0 > 0 && j0 < last && !StoresValues(d) && !plantrace.Every() {
			// A plan: the tiles allocate nothing (the temporary is
			// taken above), so the first and the last (which may be
			// narrower) check every shape the others would.
			j0 = last
		}
		w := min(tn, g.N-j0)
		p := g
		p.N = w
		p.C.Offset += j0
		p.StrideB, p.OuterStrideB = 0, 0
		if g.HasBias() {
			p.Bias.Offset += j0
			p.Bias.Shape, p.Bias.Strides = []int{w}, []int{1}
		}
		if g.TransB {
			t := as(tile, w, g.K)
			Dequantize(d, t, g.B, j0, j0+w, 0, g.K)
			p.B, p.LDB = t, g.K
		} else {
			t := as(tile, g.K, w)
			Dequantize(d, t, g.B, 0, g.K, j0, j0+w)
			p.B, p.LDB = t, w
		}
		d.Gemm(p)
	}
}

// Dequantize writes rows [r0, r1) × columns [c0, c1) of the quantized
// matrix src into dst (contiguous, [r1-r0, c1-c0], F32, F64, F16 or
// BF16): d's kernel, or the host path.
func Dequantize(d Device, dst, src View, r0, r1, c0, c1 int) {
	rows, cols := QuantMatrix(src)
	if !src.DType.IsQuantized() || src.Offset != 0 || !dst.DType.IsFloat() || !dst.Contiguous() ||
		r0 < 0 || r1 > rows || r0 > r1 || c0 < 0 || c1 > cols || c0 > c1 || dst.Len() != (r1-r0)*(c1-c0) {
		panic(fmt.Sprintf("device: Dequantize: rows %d:%d, columns %d:%d of a %d×%d %v matrix into %v %v", r0, r1, c0, c1, rows, cols, src.DType, dst.DType, dst.Shape))
	}
	if r0 == r1 || c0 == c1 {
		return
	}
	if k, ok := capable(d, CapDequantize).(Dequantizer); ok {
		k.Dequantize(dst, src, r0, r1, c0, c1)
		return
	}
	hostDequantize(d, dst, src, r0, r1, c0, c1)
}

// Quantize writes src (a contiguous float view) quantized into dst (a
// quantized tensor's whole storage, as many elements): on the device
// when it is a Quantizer, else on the host a chunk at a time. A
// non-finite element is a *NonFiniteError.
func Quantize(d Device, dst, src View) error {
	if !dst.DType.IsQuantized() || dst.Offset != 0 || !src.DType.IsFloat() || !src.Contiguous() || src.Len() != dst.Len() {
		panic(fmt.Sprintf("device: Quantize: %v %v into %v %v at offset %d", src.DType, src.Shape, dst.DType, dst.Shape, dst.Offset))
	}
	if q, ok := As[Quantizer](d); ok {
		return q.Quantize(dst, src)
	}
	return hostQuantize(d, dst, src)
}

// quantChunk is how many elements the host paths handle at a time (a
// multiple of QuantBlock and of 2).
const quantChunk = 1 << 16

// quantHost is the host memory of one host-path call, pooled so that
// the paths make no Go-heap buffers per call (beyond Quantize's NF4
// absmaxes, one F32 per 64 elements of the tensor, which the double
// quantization needs whole).
type quantHost struct {
	in     []byte    // source or code bytes
	x      []float32 // values
	out    []byte    // converted values
	scales []float32
	sb     []byte // scale bytes
	aq     []byte // absmax codes
	// hdr is a slice, not an array in the struct: a device copies into
	// it through cgo, which refuses memory that holds Go pointers.
	hdr []byte
}

var quantHosts = sync.Pool{New: func() any {
	return &quantHost{in: make([]byte, 8*quantChunk), x: make([]float32, quantChunk), out: make([]byte, 8*quantChunk),
		scales: make([]float32, quantChunk/QuantBlock+2), sb: make([]byte, 4*(quantChunk/QuantBlock+2)), aq: make([]byte, quantChunk/QuantBlock+2),
		hdr: make([]byte, 1092)}
}}

// f32Bytes views float32s as their little-endian bytes.
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafeBytes(f)
}

// readF32s reads n little-endian float32s at byte offset off of b.
func readF32s(d Device, dst []float32, b Buffer, off int64, tmp []byte) {
	t := tmp[:4*len(dst)]
	d.Read(t, b, off)
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(t[4*i:]))
	}
}

// nf4Header reads an NF4 tensor's offset and tables.
func nf4Header(d Device, b Buffer, h *quantHost) (offset float32, levels [16]float32, m [256]float32) {
	d.Read(h.hdr, b, 0)
	offset = math.Float32frombits(binary.LittleEndian.Uint32(h.hdr[:]))
	for i := range levels {
		levels[i] = math.Float32frombits(binary.LittleEndian.Uint32(h.hdr[4+4*i:]))
	}
	for i := range m {
		m[i] = math.Float32frombits(binary.LittleEndian.Uint32(h.hdr[68+4*i:]))
	}
	return offset, levels, m
}

// putValues converts F32 values to dt's little-endian bytes in out,
// each rounded once (to nearest even).
func putValues(out []byte, dt DType, x []float32) []byte {
	switch dt {
	case F32:
		out = out[:4*len(x)]
		for i, v := range x {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case F64:
		out = out[:8*len(x)]
		for i, v := range x {
			binary.LittleEndian.PutUint64(out[8*i:], math.Float64bits(float64(v)))
		}
	case BF16:
		out = out[:2*len(x)]
		for i, v := range x {
			binary.LittleEndian.PutUint16(out[2*i:], bf16FromF32(v))
		}
	case F16:
		out = out[:2*len(x)]
		for i, v := range x {
			binary.LittleEndian.PutUint16(out[2*i:], float16.Fromfloat32(v).Bits())
		}
	default:
		panic("device: dequantizing to " + dt.String())
	}
	return out
}

// bf16FromF32 rounds to nearest even (dequantized values are finite).
func bf16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// hostDequantize is Dequantize through Read and Write: a row's columns
// (or whole rows together) a chunk at a time.
func hostDequantize(d Device, dst, src View, r0, r1, c0, c1 int) {
	_, cols := QuantMatrix(src)
	h := quantHosts.Get().(*quantHost)
	defer quantHosts.Put(h)
	n := src.Len()
	var (
		offset float32
		levels [16]float32
		m      [256]float32
		nl     NF4Layout
		il     Int8Layout
	)
	if src.DType == NF4 {
		offset, levels, m = nf4Header(d, src.Buf, h)
		nl = NF4LayoutOf(n)
	} else {
		il = Int8LayoutOf(n)
	}
	size := int64(dst.DType.Size())
	// One flat range [f0, f1) of src per row, or all rows at once.
	span := func(f0, f1 int, at int64) {
		for s := f0; s < f1; {
			e := min(f1, (s/quantChunk+1)*quantChunk)
			b0, b1 := s/QuantBlock, (e-1)/QuantBlock+1
			x := h.x[:e-s]
			if src.DType == NF4 {
				sc := h.scales[:b1-b0]
				n0, n1 := b0/NF4NestedBlock, (b1-1)/NF4NestedBlock+1
				d.Read(h.aq[:b1-b0], src.Buf, nl.AbsmaxAt()+int64(b0))
				var nb [quantChunk / QuantBlock / NF4NestedBlock]float32 // a chunk lies in one aligned window
				readF32s(d, nb[:n1-n0], src.Buf, nl.NestedAt()+4*int64(n0), h.sb)
				for b := b0; b < b1; b++ {
					sc[b-b0] = NF4Absmax(&m, h.aq[b-b0], nb[b/NF4NestedBlock-n0], offset)
				}
				lo, hi := s/2, (e+1)/2
				d.Read(h.in[:hi-lo], src.Buf, nl.CodesAt()+int64(lo))
				for i := s; i < e; i++ {
					c := h.in[i/2-lo]
					if i%2 == 0 {
						c >>= 4
					}
					x[i-s] = float32(levels[c&15] * sc[i/QuantBlock-b0])
				}
			} else {
				sc := h.scales[:b1-b0]
				readF32s(d, sc, src.Buf, il.AbsmaxAt()+4*int64(b0), h.sb)
				for i := range sc {
					sc[i] = Int8Step(sc[i])
				}
				d.Read(h.in[:e-s], src.Buf, il.CodesAt()+int64(s))
				for i := s; i < e; i++ {
					x[i-s] = float32(float32(int8(h.in[i-s])) * sc[i/QuantBlock-b0])
				}
			}
			d.Write(dst.Buf, at+size*int64(s-f0), putValues(h.out, dst.DType, x))
			s = e
		}
	}
	at := size * int64(dst.Offset)
	if c0 == 0 && c1 == cols {
		span(r0*cols, r1*cols, at)
		return
	}
	for r := r0; r < r1; r++ {
		span(r*cols+c0, r*cols+c1, at+size*int64((r-r0)*(c1-c0)))
	}
}

// hostQuantize is Quantize through Read and Write, a chunk at a time,
// the chunks spread over GOMAXPROCS goroutines (each block's codes depend
// on the block alone, and the device serialises the copies): one core
// took 92 s over a Llama 3.1 8B's weights on a GPU, which now quantizes
// in its own kernels.
func hostQuantize(d Device, dst, src View) error {
	n := src.Len()
	size := int64(src.DType.Size())
	var absmax []float32 // NF4: every block's, for the double quantization
	nl, il := NF4LayoutOf(n), Int8LayoutOf(n)
	if dst.DType == NF4 {
		absmax = make([]float32, nl.Blocks)
	}
	chunks := (n + quantChunk - 1) / quantChunk
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first *NonFiniteError
		wg    sync.WaitGroup
	)
	work := func() {
		defer wg.Done()
		h := quantHosts.Get().(*quantHost)
		defer quantHosts.Put(h)
		for c := int(next.Add(1) - 1); c < chunks; c = int(next.Add(1) - 1) {
			s := c * quantChunk
			e := min(n, s+quantChunk)
			x := h.x[:e-s]
			raw := h.in[:int64(e-s)*size]
			d.Read(raw, src.Buf, size*int64(src.Offset+s))
			getValues(x, src.DType, raw)
			b0 := s / QuantBlock
			var err error
			if dst.DType == NF4 {
				codes := h.out[:(e-s+1)/2]
				if err = NF4Encode(codes, absmax[b0:], x, e == n); err == nil {
					d.Write(dst.Buf, nl.CodesAt()+int64(s/2), codes)
				}
			} else {
				codes := h.out[:e-s]
				sc := h.scales[:(e-s+QuantBlock-1)/QuantBlock]
				if err = Int8Encode(int8s(codes), sc, x); err == nil {
					d.Write(dst.Buf, il.CodesAt()+int64(s), codes)
					d.Write(dst.Buf, il.AbsmaxAt()+4*int64(b0), f32Bytes(sc))
				}
			}
			if nf, ok := err.(*NonFiniteError); ok {
				mu.Lock()
				if first == nil || s+nf.Index < first.Index {
					first = &NonFiniteError{Index: s + nf.Index, Value: nf.Value}
				}
				mu.Unlock()
			}
		}
	}
	workers := max(1, min(runtime.GOMAXPROCS(0), chunks))
	wg.Add(workers)
	for range workers - 1 {
		go work()
	}
	work()
	wg.Wait()
	if first != nil {
		return first
	}
	if dst.DType == NF4 {
		return writeNF4Tables(d, dst.Buf, nl, absmax)
	}
	return nil
}

// writeNF4Tables double-quantizes a tensor's absmaxes and writes them
// with the offset and the tables.
func writeNF4Tables(d Device, b Buffer, l NF4Layout, absmax []float32) error {
	m := dynamicMap
	q := make([]byte, l.Blocks)
	nested := make([]float32, l.Nested)
	offset := NF4Nest(q, nested, absmax, &m)
	return WriteNF4(d, b, l, &NF4Parts{Offset: offset, Levels: nf4Levels, Map: m, Nested: nested, AbsmaxCodes: q})
}

// WriteNF4 writes p's offset, tables, nested scales and absmax codes,
// and its codes when it has them, into an NF4 storage of layout l.
func WriteNF4(d Device, b Buffer, l NF4Layout, p *NF4Parts) error {
	if len(p.Nested) != l.Nested || len(p.AbsmaxCodes) != l.Blocks || p.Codes != nil && len(p.Codes) != (l.N+1)/2 {
		return fmt.Errorf("device: NF4 parts of %d nested scales, %d absmax codes and %d code bytes for %d elements (want %d, %d, %d)",
			len(p.Nested), len(p.AbsmaxCodes), len(p.Codes), l.N, l.Nested, l.Blocks, (l.N+1)/2)
	}
	var hdr [1092]byte
	binary.LittleEndian.PutUint32(hdr[:], math.Float32bits(p.Offset))
	for i, v := range p.Levels {
		binary.LittleEndian.PutUint32(hdr[4+4*i:], math.Float32bits(v))
	}
	for i, v := range p.Map {
		binary.LittleEndian.PutUint32(hdr[68+4*i:], math.Float32bits(v))
	}
	d.Write(b, 0, hdr[:])
	d.Write(b, l.NestedAt(), f32Bytes(p.Nested))
	d.Write(b, l.AbsmaxAt(), p.AbsmaxCodes)
	if p.Codes != nil {
		d.Write(b, l.CodesAt(), p.Codes)
	}
	return nil
}

// WriteInt8 writes p into an Int8 storage of layout l.
func WriteInt8(d Device, b Buffer, l Int8Layout, p *Int8Parts) error {
	if len(p.Absmax) != l.Blocks || len(p.Codes) != l.N {
		return fmt.Errorf("device: Int8 parts of %d scales and %d codes for %d elements (want %d, %d)", len(p.Absmax), len(p.Codes), l.N, l.Blocks, l.N)
	}
	d.Write(b, l.AbsmaxAt(), f32Bytes(p.Absmax))
	d.Write(b, l.CodesAt(), unsafeBytes(p.Codes))
	return nil
}

// getValues widens little-endian values of dt to F32 (F64 rounded).
func getValues(x []float32, dt DType, raw []byte) {
	for i := range x {
		switch dt {
		case F32:
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		case F64:
			x[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))
		case BF16:
			x[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		case F16:
			x[i] = float16.Frombits(binary.LittleEndian.Uint16(raw[2*i:])).Float32()
		default:
			panic("device: quantizing " + dt.String())
		}
	}
}

// ElementF32 reads element i of the contiguous float view src as F32,
// converted as quantizing converts it: how a Quantizer that finds a
// non-finite element on the device names its value.
func ElementF32(d Device, src View, i int) float32 {
	size := src.DType.Size()
	raw := make([]byte, size)
	d.Read(raw, src.Buf, int64(src.Offset+i)*int64(size))
	var x [1]float32
	getValues(x[:], src.DType, raw)
	return x[0]
}

// unsafeBytes views a slice's elements as bytes (memfit runs on
// little-endian hosts only; see tensor's writeElems).
func unsafeBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// int8s views bytes as int8 codes.
func int8s(b []byte) []int8 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*int8)(unsafe.Pointer(&b[0])), len(b))
}
