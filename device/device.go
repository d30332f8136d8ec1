package device

import (
	"fmt"

	"github.com/memfit/memfit/memory"
)

// DType is the element type of a buffer.
type DType uint8

// The element types memfit stores. F32, F16 and BF16 hold model values; F64
// exists for gradient checks on CPU; I32 and I64 hold indices and tokens.
const (
	Invalid DType = iota
	F32
	F64
	F16
	BF16
	I32
	I64
	// U8 holds bytes that are not numbers by themselves: the codes of
	// quantized optimizer state (quant8.go). Kernels other than Fill,
	// Copy between U8 views and the quantized optimizer steps need not
	// accept it; host copies (Read, Write) always do.
	U8
	// NF4 and Int8 are frozen weights stored in blocks of 64 with a scale
	// per block (quant4.go, quantint8.go): not a whole number of bytes per
	// element, so Size is 0 and Bytes gives a tensor's exact size. Only the
	// quantized products (QuantGemm), Dequantize and Quantize read or
	// write them; host copies move their bytes.
	NF4
	Int8
)

// Size is the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F64, I64:
		return 8
	case F16, BF16:
		return 2
	case U8:
		return 1
	}
	return 0
}

// IsFloat reports whether d holds floating-point values.
func (d DType) IsFloat() bool { return d == F32 || d == F64 || d == F16 || d == BF16 }

// IsLowPrecision reports whether d is one of the 16-bit float types.
func (d DType) IsLowPrecision() bool { return d == F16 || d == BF16 }

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F64:
		return "f64"
	case F16:
		return "f16"
	case BF16:
		return "bf16"
	case I32:
		return "i32"
	case I64:
		return "i64"
	case U8:
		return "u8"
	case NF4:
		return "nf4"
	case Int8:
		return "int8"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// IsQuantized reports whether d is a block-quantized weight format (NF4,
// Int8), whose elements only the quantized kernels read.
func (d DType) IsQuantized() bool { return d == NF4 || d == Int8 }

// Bytes is the exact size in bytes of n elements of d: n·Size() for the
// element types, the codes and block scales of the quantized formats
// (NF4Bytes, Int8Bytes). Allocations and the meta device's accounting
// use it, so plans stay exact for every format.
func Bytes(d DType, n int) int64 {
	switch d {
	case NF4:
		return NF4Bytes(n)
	case Int8:
		return Int8Bytes(n)
	}
	return int64(n) * int64(d.Size())
}

// ParseDType maps "f32", "bf16", "nf4", ... back to a DType.
func ParseDType(s string) (DType, error) {
	for _, d := range []DType{F32, F64, F16, BF16, I32, I64, NF4, Int8} {
		if d.String() == s {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("device: unknown dtype %q (want f32, f64, f16, bf16, i32, i64, nf4 or int8)", s)
}

// Buffer is a piece of device memory obtained from a device's caching
// allocator. Host is the same memory as bytes when the host can address it
// (the CPU device); it is nil on devices whose memory the host cannot touch.
type Buffer struct {
	Block *memory.Block
	Host  []byte
}

// View describes the elements of a buffer a kernel reads or writes: an
// element offset, a shape and per-dimension strides in elements. A stride of
// 0 repeats (broadcasts) an element along that dimension.
type View struct {
	Buf     Buffer
	DType   DType
	Offset  int
	Shape   []int
	Strides []int
}

// Len is the number of elements the view covers.
func (v View) Len() int {
	n := 1
	for _, d := range v.Shape {
		n *= d
	}
	return n
}

// Contiguous reports whether the view's elements are dense and row-major.
func (v View) Contiguous() bool {
	want := 1
	for i := len(v.Shape) - 1; i >= 0; i-- {
		if v.Shape[i] != 1 && v.Strides[i] != want {
			return false
		}
		want *= v.Shape[i]
	}
	return true
}

// Device is what the tensor package calls: a name, a caching allocator, host
// copies and a kernel set. Implementations: device/cpu, device/meta and, in
// builds with the cuda tag, device/cuda.
type Device interface {
	Name() string
	Memory() *memory.Allocator
	// Alloc returns size bytes tagged with cat; the error is a *memory.OOMError
	// when the device is full.
	Alloc(size int64, cat memory.Category) (Buffer, error)
	Free(b Buffer)
	// Write copies host bytes into the buffer at byte offset off.
	Write(dst Buffer, off int64, src []byte)
	// Read copies bytes of the buffer at byte offset off into dst.
	Read(dst []byte, src Buffer, off int64)
	Kernels
}

// UnaryOp selects an elementwise function of one operand (and a scalar arg).
type UnaryOp uint8

// Unary operations. Arg is the scalar operand where one is named.
const (
	Neg UnaryOp = iota
	Exp
	Log
	Sqrt
	Tanh
	Sigmoid
	Relu
	Gelu // tanh approximation, as GPT-2
	Abs
	Square
	Recip
	PowScalar // x^arg
	AddScalar // x+arg
	MulScalar // x*arg
	// GeluErf is the exact GELU, x·Φ(x) = x·(1+erf(x/√2))/2, as BERT-family
	// models and PyTorch's default nn.GELU use. It comes last so that the
	// codes of the ops above do not move.
	GeluErf
	NumUnaryOps
)

var unaryNames = [...]string{"neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "abs", "square", "recip", "pow", "add_scalar", "mul_scalar", "gelu_erf"}

func (op UnaryOp) String() string {
	if int(op) < len(unaryNames) {
		return unaryNames[op]
	}
	return fmt.Sprintf("unary(%d)", uint8(op))
}

// BinaryOp selects an elementwise function of two operands.
type BinaryOp uint8

// Binary operations.
const (
	Add BinaryOp = iota
	Sub
	Mul
	Div
	Maximum
	Minimum
	Equal // 1 where a == b, else 0
	NumBinaryOps
)

var binaryNames = [...]string{"add", "sub", "mul", "div", "maximum", "minimum", "equal"}

func (op BinaryOp) String() string {
	if int(op) < len(binaryNames) {
		return binaryNames[op]
	}
	return fmt.Sprintf("binary(%d)", uint8(op))
}

// ReduceOp selects a reduction.
type ReduceOp uint8

// Reductions.
const (
	Sum ReduceOp = iota
	Max
	Min
)

// Gemm describes C = Alpha·op(A)·op(B) + Beta·C for Batch independent
// row-major matrices. op(A) is M×K, op(B) is K×N, C is M×N. The views give
// buffer, dtype and element offset of the first matrix; LD* are row strides
// and Stride* the element distance between consecutive matrices of the batch
// (0 repeats one matrix for every batch entry). A and B share a dtype; C is
// F32 or the same dtype as A and B; products accumulate in at least F32.
//
// Triangle declares causal structure in each matrix (see the constants);
// a device may ignore LowerA and UpperA (computing the zeros it could
// skip) but must honour LowerC's zeros.
//
// Bias, when it has a dtype, is a contiguous vector of N elements added to
// every row of every C: C = Alpha·op(A)·op(B) + Bias, Beta 0 and no
// Triangle (a linear layer's x·Wᵀ + b). A device may add it inside the product (the CPU adds
// an F32 bias to each tile before a 16-bit C is rounded) or write it into
// C first and accumulate onto it (BiasFirst); the two differ only in how
// often a 16-bit C's bias is rounded.
type Gemm struct {
	TransA, TransB            bool
	M, N, K, Batch            int
	Alpha, Beta               float64
	A, B, C                   View
	LDA, LDB, LDC             int
	StrideA, StrideB, StrideC int
	// Outer, above 1, repeats the batch: Outer groups of Batch products,
	// each group OuterStride* elements after the one before (attention
	// heads viewed inside [B, T, H, D]: B groups of H heads, whose
	// strides do not collapse into one). 0 or 1: a single group.
	Outer                                    int
	OuterStrideA, OuterStrideB, OuterStrideC int
	Triangle                                 Triangle
	Bias                                     View
}

// HasBias reports whether g adds a bias.
func (g Gemm) HasBias() bool { return g.Bias.DType != Invalid }

// BiasFirst writes g's bias into every row of each of its C matrices and
// returns g without it, accumulating onto C (Beta 1): how a device whose
// products cannot add a bias runs one.
func BiasFirst(k Kernels, g Gemm) Gemm {
	if !g.HasBias() {
		return g
	}
	if g.Beta != 0 {
		panic("device: a Gemm with a bias needs Beta 0")
	}
	for p := range g.Groups() * g.Batch {
		o, b := p/g.Batch, p%g.Batch
		c := g.C
		c.Offset += o*g.OuterStrideC + b*g.StrideC
		c.Shape, c.Strides = []int{g.M, g.N}, []int{g.LDC, 1}
		bias := g.Bias
		bias.Shape, bias.Strides = []int{g.M, g.N}, []int{0, 1}
		k.Copy(c, bias)
	}
	g.Bias, g.Beta = View{}, 1
	return g
}

// Groups returns max(Outer, 1).
func (g Gemm) Groups() int { return max(g.Outer, 1) }

// Group returns group o of g as a single-group Gemm.
func (g Gemm) Group(o int) Gemm {
	g.A.Offset += o * g.OuterStrideA
	g.B.Offset += o * g.OuterStrideB
	g.C.Offset += o * g.OuterStrideC
	g.Outer, g.OuterStrideA, g.OuterStrideB, g.OuterStrideC = 0, 0, 0, 0
	return g
}

// Triangle is the triangular structure of a square product, as in causal
// attention, which lets a device skip the half that cannot matter.
type Triangle uint8

const (
	// Full is an ordinary product.
	Full Triangle = iota
	// LowerC (M = N, Beta 0) computes C's lower triangle, j <= i, and
	// sets the elements above the diagonal to zero.
	LowerC
	// LowerA (M = K): the caller guarantees op(A) is zero above its
	// diagonal (k > i), so a device may skip those elements.
	LowerA
	// UpperA (M = K): op(A) is zero below its diagonal (k < i).
	UpperA
)

// ConvGeom is the geometry of a 2-D convolution over NCHW images. Kernel
// tap (kh, kw) of output (oh, ow) reads input (oh·StrideH - PadH +
// kh·DilationH, ow·StrideW - PadW + kw·DilationW); a dilation of 0 means 1.
// Pools ignore dilation (the tensor package never sets it for them).
type ConvGeom struct {
	N, C, H, W           int
	KH, KW               int
	StrideH, StrideW     int
	PadH, PadW           int
	OH, OW               int
	DilationH, DilationW int
}

// Dilation returns the dilations with 0 read as 1.
func (g ConvGeom) Dilation() (dh, dw int) { return max(g.DilationH, 1), max(g.DilationW, 1) }

// PoolOp selects max or average pooling.
type PoolOp uint8

// Pooling operations.
const (
	MaxPool PoolOp = iota
	AvgPool
)

// Distribution selects what Random draws.
type Distribution uint8

// Distributions for Random: Uniform on [A, B), Normal with mean A and
// standard deviation B.
const (
	Uniform Distribution = iota
	Normal
)

// Kernels is the compute surface every device must have: fills and
// copies, elementwise functions and their derivatives, reductions, GEMM,
// indexing (gather, scatter-add, im2col, pooling), dropout, random fills,
// masking and the finiteness check. Fused kernels (softmax, layer norm,
// cross-entropy, the causal mask, optimizer updates) are optional
// capabilities, each its own interface (capability.go): a device that has
// one is called directly, and one that lacks it gets the composition of
// these core kernels that the package-level function of the same name runs.
//
// Views passed as dst are written; all others are read. Unless a method
// says otherwise dst is contiguous and inputs may be strided; elementwise
// kernels (Copy, Unary, Binary, MaskedFill) may be given dst equal to an
// input. Methods never allocate device memory except where noted; a kernel
// given inconsistent arguments panics, because the tensor package has
// already checked what users control.
type Kernels interface {
	Fill(dst View, v float64)
	// Copy copies src into dst element by element (same shape, any strides
	// on both sides), converting between dtypes with round-to-nearest-even.
	Copy(dst, src View)
	Unary(op UnaryOp, dst, src View, arg float64)
	// UnaryBackward computes dx = dy·f'(x) where y = f(x) is given too, for
	// functions whose derivative is cheaper from y (tanh, sigmoid, exp).
	UnaryBackward(op UnaryOp, dx, x, y, dy View, arg float64)
	// Binary computes dst = a op b; a and b have dst's shape, broadcast
	// through zero strides.
	Binary(op BinaryOp, dst, a, b View)
	// Reduce reduces src into dst, which has src's rank with size 1 on the
	// reduced dimensions.
	Reduce(op ReduceOp, dst, src View)
	Gemm(g Gemm)
	// Gather copies rows of table (V×D) selected by idx (I32/I64) into dst.
	Gather(dst, table, idx View)
	// ScatterAdd adds rows of src into the rows of dst selected by idx.
	ScatterAdd(dst, idx, src View)
	Im2Col(col, x View, g ConvGeom)
	// Col2Im accumulates col back into dx (dx is zeroed first).
	Col2Im(dx, col View, g ConvGeom)
	// Pool writes y and, for max pooling, the I32 index of each maximum in
	// argmax; the geometry's C is channels, KH/KW the window.
	Pool(op PoolOp, y, argmax, x View, g ConvGeom)
	PoolBackward(op PoolOp, dx, argmax, dy View, g ConvGeom)
	// Dropout writes dst = src·mask/(1-p) with a mask drawn from a
	// counter-based generator keyed by seed, so backward regenerates the
	// same mask instead of storing it.
	Dropout(dst, src View, p float64, seed uint64)
	// Random fills dst from dist, reproducibly for a seed.
	Random(dst View, dist Distribution, a, b float64, seed uint64)
	// MaskedFill writes dst = value where mask != 0, else src.
	MaskedFill(dst, src, mask View, value float64)
	// AllFinite reports whether every element of src is finite.
	AllFinite(src View) bool
}

// AdamHyper are the hyper-parameters of one Adam/AdamW update. GradScale
// multiplies the gradient first (1/loss-scale, or 1 when unscaled).
// Decoupled selects AdamW's weight decay (p -= lr·wd·p) over Adam's L2 term
// (g += wd·p). BiasCorrection1/2 are 1-β1^t and 1-β2^t.
type AdamHyper struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Decoupled                          bool
	BiasCorrection1, BiasCorrection2   float64
	GradScale                          float64
}

// SGDHyper are the hyper-parameters of one SGD update, as PyTorch defines
// them: g += wd·p; buf = momentum·buf + (1-dampening)·g (buf = g on the
// first step); g = nesterov ? g + momentum·buf : buf; p -= lr·g.
type SGDHyper struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov, FirstStep                  bool
	GradScale                            float64
}

// UnaryNeeds says which of x (the input) and y (the output) UnaryBackward
// reads for op, so that callers save only those for backward.
func UnaryNeeds(op UnaryOp) (x, y bool) {
	switch op {
	case Exp, Sqrt, Tanh, Sigmoid, Recip, Relu: // relu: y > 0 exactly where x > 0
		return false, true
	case Log, Gelu, GeluErf, Abs, Square, PowScalar:
		return true, false
	}
	return false, false
}

// IndexError is the panic value of a kernel given an index outside its
// table (an embedding lookup of a token past the vocabulary, a class target
// past the number of classes). The tensor package turns it into an error at
// the step boundary.
type IndexError struct {
	Op    string
	Index int64
	Limit int
	At    int // position of the offending index in its tensor
}

func (e *IndexError) Error() string {
	return fmt.Sprintf("%s: index %d at position %d is outside [0, %d)", e.Op, e.Index, e.At, e.Limit)
}
