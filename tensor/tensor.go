package tensor

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// DType is the element type of a tensor.
type DType = device.DType

// Element types, re-exported from package device.
const (
	F32  = device.F32
	F64  = device.F64
	F16  = device.F16
	BF16 = device.BF16
	I32  = device.I32
	I64  = device.I64
	U8   = device.U8
	// NF4 and Int8 hold frozen weights quantized in blocks (quant.go).
	NF4  = device.NF4
	Int8 = device.Int8
)

// storage is reference-counted device memory. Every Tensor handle holds one
// reference; autograd nodes hold their own for what they saved.
type storage struct {
	dev     device.Device
	buf     device.Buffer
	refs    atomic.Int32
	version atomic.Int64 // bumped by every in-place write
	size    int64        // bytes asked for

	// Storage shared by flattened parameters (Flatten) can be evicted:
	// its memory freed while its handles live, and allocated again
	// (Rematerialize). evictable also keeps its casts out of autocast's
	// weight cache, which would hold the copy eviction means to free.
	evictable bool
	evicted   bool
	cat       memory.Category // the category to allocate again under
	// deferred writes the values of a storage made by Deferred (evicted
	// from the start, never allocated) where Flatten places them;
	// deferEnd runs once when such a storage goes (drawn or released).
	deferred func(device.View) error
	deferEnd func()
}

func (st *storage) retain() { st.refs.Add(1) }

func (st *storage) release() {
	switch n := st.refs.Add(-1); {
	case n == 0:
		if !st.evicted {
			st.dev.Free(st.buf)
		}
		if end := st.deferEnd; end != nil {
			st.deferEnd = nil
			end()
		}
		st.buf = device.Buffer{}
	case n < 0:
		panic("tensor: storage released more often than retained")
	}
}

// Tensor is a handle on a strided view of reference-counted storage. The
// handle is owned by whoever created it (the caller of the op that returned
// it, or a Scope); Release drops it. Several handles may share storage
// (views, tensors saved for backward); the memory returns to the device's
// cache when the last one is released. Nothing relies on the garbage
// collector to free device memory.
type Tensor struct {
	st      *storage
	shape   []int
	strides []int
	offset  int
	dtype   DType

	requiresGrad bool            // a leaf whose gradient is wanted (a parameter)
	grad         *Tensor         // accumulated gradient of a leaf
	gradCat      memory.Category // category of grad when allocated; 0: memory.Gradient
	gradReady    func(*Tensor)   // OnGradReady's hook
	node         *node           // the op that produced this tensor, when recorded
	name         string          // optional label used in error messages

	owner    *Scope
	released bool
}

// Shape returns the tensor's dimensions (do not modify).
func (t *Tensor) Shape() []int { return t.shape }

// Strides returns the element strides (do not modify).
func (t *Tensor) Strides() []int { return t.strides }

// DType is the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Dim is the number of dimensions.
func (t *Tensor) Dim() int { return len(t.shape) }

// Len is the number of elements.
func (t *Tensor) Len() int { return numel(t.shape) }

// Bytes is the size of the tensor's elements in bytes (a quantized
// tensor's codes and scales: device.Bytes).
func (t *Tensor) Bytes() int64 { return device.Bytes(t.dtype, t.Len()) }

// Device is the device holding the tensor.
func (t *Tensor) Device() device.Device { return t.st.dev }

// Name is the label given with SetName (parameters carry their path).
func (t *Tensor) Name() string { return t.name }

// SetName labels the tensor for error messages and reports.
func (t *Tensor) SetName(name string) *Tensor { t.name = name; return t }

// Released reports whether Release has been called on this handle.
func (t *Tensor) Released() bool { return t.released }

// Version counts in-place writes to the tensor's storage.
func (t *Tensor) Version() int64 { return t.st.version.Load() }

// Category is the allocator category of the tensor's storage.
func (t *Tensor) Category() memory.Category {
	if t.st.evicted {
		return t.st.cat
	}
	if t.st.buf.Block == nil {
		return memory.Other
	}
	return t.st.buf.Block.Category()
}

// Release drops this handle's reference to its storage and to the autograd
// graph behind it. It is idempotent, so a tensor released explicitly may
// still belong to a Scope that releases it again at Close.
func (t *Tensor) Release() {
	if t == nil || t.released {
		return
	}
	t.released = true
	untrack(t)
	if t.node != nil {
		t.node.release()
		t.node = nil
	}
	if t.grad != nil {
		t.grad.Release()
		t.grad = nil
	}
	t.st.release()
}

func (t *Tensor) mustLive(op string) {
	if t == nil {
		panic(errorf(op, "nil tensor"))
	}
	if t.released {
		panic(errorf(op, "use of released tensor %s", t.describe()))
	}
	if t.dtype.IsQuantized() && !quantizedOps[op] {
		panic(errorf(op, "%s is a quantized frozen weight: only MatMul (as its second operand), Linear (as the weight), Cast and ConvertTo to a float dtype, Float32s/Float64s and whole-storage copies take it", t.describe()))
	}
}

func (t *Tensor) describe() string {
	s := fmt.Sprintf("%v %v", t.dtype, t.shape)
	if t.name != "" {
		s = t.name + " " + s
	}
	return s
}

func (t *Tensor) String() string { return "tensor(" + t.describe() + ")" }

// view is the kernel-facing description of t.
// View describes t's elements in its device's memory, for code outside
// this package that hands device memory to another engine (a collective
// library writing gradients in place). It is valid while t is live. Writes
// through it are invisible to the version check of saved tensors, so it is
// for tensors no recorded graph has saved (gradients, parameters between
// steps).
func (t *Tensor) View() device.View {
	t.mustLive("View")
	return t.view()
}

func (t *Tensor) view() device.View {
	if t.st.evicted {
		if t.st.deferred != nil {
			panic(errorf("deferred", "%s has no values yet: it was made deferred, to be drawn where a sharding (ZeRO-3) places it, and nothing has", t.describe()))
		}
		panic(errorf("evicted", "%s is not materialized: its storage was evicted (a parameter sharded across ranks, used outside the gather of its block)", t.describe()))
	}
	return device.View{Buf: t.st.buf, DType: t.dtype, Offset: t.offset, Shape: t.shape, Strides: t.strides}
}

// broadcastView describes t repeated to shape (right-aligned broadcasting).
func (t *Tensor) broadcastView(shape []int) device.View {
	v := t.view()
	v.Shape = shape
	v.Strides = make([]int, len(shape))
	off := len(shape) - len(t.shape)
	for i := range t.shape {
		if t.shape[i] != 1 {
			v.Strides[off+i] = t.strides[i]
		}
	}
	return v
}

// share returns a new handle on the same elements, with no autograd history.
func (t *Tensor) share() *Tensor {
	t.st.retain()
	return &Tensor{st: t.st, shape: t.shape, strides: t.strides, offset: t.offset, dtype: t.dtype, name: t.name}
}

// IsContiguous reports whether the elements are dense and row-major.
func (t *Tensor) IsContiguous() bool {
	// From the layout alone: an evicted or deferred storage has one too.
	return device.View{DType: t.dtype, Offset: t.offset, Shape: t.shape, Strides: t.strides}.Contiguous()
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func contiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// alloc makes an uninitialised contiguous tensor. Errors are returned so
// that constructors can hand them to users; ops panic with them instead.
func alloc(dev device.Device, dtype DType, shape []int, cat memory.Category) (*Tensor, error) {
	for _, d := range shape {
		if d < 0 {
			return nil, errorf("alloc", "negative dimension in shape %v", shape)
		}
	}
	if dtype.Size() == 0 && !dtype.IsQuantized() {
		return nil, errorf("alloc", "invalid dtype %v", dtype)
	}
	shape = append([]int(nil), shape...)
	size := device.Bytes(dtype, numel(shape))
	buf, err := dev.Alloc(size, cat)
	if err != nil {
		return nil, err
	}
	st := &storage{dev: dev, buf: buf, size: size}
	st.refs.Store(1)
	t := &Tensor{st: st, shape: shape, strides: contiguousStrides(shape), dtype: dtype}
	track(t)
	return t, nil
}

func mustAlloc(dev device.Device, dtype DType, shape []int, cat memory.Category) *Tensor {
	t, err := alloc(dev, dtype, shape, cat)
	if err != nil {
		panic(err)
	}
	return t
}

// mustAllocLike is mustAlloc with like's shape and the order of like's
// strides: a gradient laid out as the strided view it belongs to (a head
// of a fused q/k/v projection) reaches that view's storage as dense rows
// instead of as a transpose. PyTorch calls this preserving the memory
// format.
func mustAllocLike(dev device.Device, dtype DType, like *Tensor, cat memory.Category) *Tensor {
	r := like.Dim()
	order := make([]int, r) // dimensions from outermost to innermost
	for i := range order {
		order[i] = i
	}
	// Broadcast dimensions (stride 0) go outermost: placed by their
	// stride, innermost, they would leave the last dimension strided,
	// and kernels that read rows of contiguous elements (attention's)
	// would write the wrong elements.
	key := func(d int) int {
		if like.strides[d] == 0 && like.shape[d] > 1 {
			return math.MaxInt
		}
		return like.strides[d]
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(key(b), key(a)) })
	phys := make([]int, r)
	for i, d := range order {
		phys[i] = like.shape[d]
	}
	t := mustAlloc(dev, dtype, phys, cat)
	dense := t.strides
	t.shape = append([]int(nil), like.shape...)
	t.strides = make([]int, r)
	for i, d := range order {
		t.strides[d] = dense[i]
	}
	return t
}

// New returns a zero-filled tensor on dev, its memory counted under cat.
func New(dev device.Device, dtype DType, shape []int, cat memory.Category) (*Tensor, error) {
	t, err := alloc(dev, dtype, shape, cat)
	if err != nil {
		return nil, err
	}
	if dtype == U8 || dtype.IsQuantized() {
		// Codes are bytes, not numbers: zeroed by host copies, which every
		// device has, rather than by a fill kernel (a quantized tensor of
		// zero bytes holds zeros: its scales are 0).
		n := t.Bytes()
		for off := int64(0); off < n; off += int64(len(zeroBytes)) {
			dev.Write(t.st.buf, off, zeroBytes[:min(int64(len(zeroBytes)), n-off)])
		}
		return t, nil
	}
	dev.Fill(t.view(), 0)
	return t, nil
}

var zeroBytes [64 << 10]byte

// FromUint8 copies data into a new U8 tensor (quantized codes).
func FromUint8(dev device.Device, data []uint8, shape []int, cat memory.Category) (*Tensor, error) {
	if err := checkLen(len(data), shape); err != nil {
		return nil, err
	}
	t, err := alloc(dev, U8, shape, cat)
	if err != nil {
		return nil, err
	}
	if len(data) > 0 {
		dev.Write(t.st.buf, 0, data)
	}
	return t, nil
}

// Uint8s copies a contiguous U8 tensor's bytes to the host.
func (t *Tensor) Uint8s() []uint8 {
	t.mustLive("Uint8s")
	if t.dtype != U8 || !t.IsContiguous() {
		panic(errorf("Uint8s", "%s is not a contiguous u8 tensor", t.describe()))
	}
	out := make([]uint8, t.Len())
	if len(out) > 0 {
		t.view() // panics if evicted
		t.st.dev.Read(out, t.st.buf, int64(t.offset))
	}
	return out
}

// Full returns a tensor filled with v.
func Full(dev device.Device, dtype DType, shape []int, v float64, cat memory.Category) (*Tensor, error) {
	t, err := alloc(dev, dtype, shape, cat)
	if err != nil {
		return nil, err
	}
	dev.Fill(t.view(), v)
	return t, nil
}

// Rand returns a tensor of draws from dist (Uniform on [a, b), Normal with
// mean a and standard deviation b), reproducible for a seed on any device.
func Rand(dev device.Device, dtype DType, shape []int, dist device.Distribution, a, b float64, seed uint64, cat memory.Category) (*Tensor, error) {
	t, err := alloc(dev, dtype, shape, cat)
	if err != nil {
		return nil, err
	}
	dev.Random(t.view(), dist, a, b, seed)
	return t, nil
}

func checkLen(n int, shape []int) error {
	if numel(shape) != n {
		return errorf("from slice", "%d values do not fill shape %v (%d elements)", n, shape, numel(shape))
	}
	return nil
}

// FromFloat32 copies data into a new F32 tensor of the given shape.
func FromFloat32(dev device.Device, data []float32, shape []int, cat memory.Category) (*Tensor, error) {
	return fromSlice(dev, F32, data, shape, cat)
}

// FromFloat64 copies data into a new F64 tensor.
func FromFloat64(dev device.Device, data []float64, shape []int, cat memory.Category) (*Tensor, error) {
	return fromSlice(dev, F64, data, shape, cat)
}

// FromInt32 copies data into a new I32 tensor.
func FromInt32(dev device.Device, data []int32, shape []int, cat memory.Category) (*Tensor, error) {
	return fromSlice(dev, I32, data, shape, cat)
}

// FromInt64 copies data into a new I64 tensor (class targets as PyTorch
// stores them, token ids past 2³¹).
func FromInt64(dev device.Device, data []int64, shape []int, cat memory.Category) (*Tensor, error) {
	return fromSlice(dev, I64, data, shape, cat)
}

// fromSlice copies data, whose element type is dtype's, into a new tensor.
func fromSlice[E float32 | float64 | int32 | int64](dev device.Device, dtype DType, data []E, shape []int, cat memory.Category) (*Tensor, error) {
	if err := checkLen(len(data), shape); err != nil {
		return nil, err
	}
	t, err := alloc(dev, dtype, shape, cat)
	if err != nil {
		return nil, err
	}
	writeElems(dev, t.st.buf, data)
	return t, nil
}

// writeElems copies data to buf as little-endian bytes: straight from
// data's memory on a little-endian host (every platform memfit runs on),
// elsewhere through a fixed 4 KiB array a piece at a time, so uploading a
// batch never makes a Go-heap copy of it.
func writeElems[E float32 | float64 | int32 | int64](dev device.Device, buf device.Buffer, data []E) {
	if len(data) == 0 {
		return
	}
	size := int(unsafe.Sizeof(data[0]))
	if littleEndian {
		dev.Write(buf, 0, unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), size*len(data)))
		return
	}
	var tmp [4096]byte
	per := len(tmp) / size
	for i := 0; i < len(data); i += per {
		part := data[i:min(i+per, len(data))]
		for j, v := range part {
			switch x := any(v).(type) {
			case float32:
				binary.LittleEndian.PutUint32(tmp[4*j:], math.Float32bits(x))
			case float64:
				binary.LittleEndian.PutUint64(tmp[8*j:], math.Float64bits(x))
			case int32:
				binary.LittleEndian.PutUint32(tmp[4*j:], uint32(x))
			case int64:
				binary.LittleEndian.PutUint64(tmp[8*j:], uint64(x))
			}
		}
		dev.Write(buf, int64(i*size), tmp[:len(part)*size])
	}
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// contiguousCopy returns t's elements densely packed in dtype (a new
// handle; t itself when nothing needs to change).
func (t *Tensor) packed(dtype DType, cat memory.Category) *Tensor {
	if t.dtype == dtype && t.IsContiguous() {
		return t.share()
	}
	src := t.view() // first: an evicted t panics before anything is allocated
	out := mustAlloc(t.st.dev, dtype, t.shape, cat)
	t.st.dev.Copy(out.view(), src)
	return out
}

// Float64s copies the tensor to the host as float64s (any dtype; a
// quantized tensor's dequantized values, each its F32 definition).
func (t *Tensor) Float64s() []float64 {
	t.mustLive("Float64s")
	var c *Tensor
	if t.dtype.IsQuantized() {
		c = t.dequantized(F64, memory.Temporary)
	} else {
		c = t.packed(F64, memory.Temporary)
	}
	defer c.Release()
	b := make([]byte, 8*c.Len())
	c.st.dev.Read(b, c.st.buf, int64(c.offset*8))
	out := make([]float64, c.Len())
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// Float32s copies the tensor to the host as float32s (any dtype; a
// quantized tensor's dequantized values exactly).
func (t *Tensor) Float32s() []float32 {
	v := t.Float64s()
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// Int64s copies an integer tensor to the host.
func (t *Tensor) Int64s() []int64 {
	t.mustLive("Int64s")
	c := t.packed(I64, memory.Temporary)
	defer c.Release()
	b := make([]byte, 8*c.Len())
	c.st.dev.Read(b, c.st.buf, int64(c.offset*8))
	out := make([]int64, c.Len())
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// Item returns the single element of a one-element tensor.
func (t *Tensor) Item() float64 {
	if t.Len() != 1 {
		panic(errorf("Item", "tensor %s has %d elements, want 1", t.describe(), t.Len()))
	}
	return t.Float64s()[0]
}

// Format renders a short summary with up to 8 values, for debugging.
func (t *Tensor) Format() string {
	v := t.Float64s()
	var b strings.Builder
	fmt.Fprintf(&b, "%s [", t.describe())
	for i, x := range v {
		if i == 8 {
			b.WriteString(" ...")
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.4g", x)
	}
	b.WriteString("]")
	return b.String()
}

// AllFinite reports whether t holds no inf or NaN (one pass on the device).
func (t *Tensor) AllFinite() bool {
	t.mustLive("AllFinite")
	return t.st.dev.AllFinite(t.view())
}

// Fill sets every element of t to v in place (its version goes up).
func (t *Tensor) Fill(v float64) {
	t.mustLive("Fill")
	t.st.dev.Fill(t.view(), v)
	t.st.version.Add(1)
}

// SetFloat32s overwrites a contiguous tensor's elements from the host,
// converting to its dtype (its version goes up). The length must match.
func (t *Tensor) SetFloat32s(data []float32) error {
	t.mustLive("SetFloat32s")
	if len(data) != t.Len() {
		return errorf("SetFloat32s", "%d values for %s", len(data), t.describe())
	}
	src, err := FromFloat32(t.st.dev, data, t.shape, memory.Temporary)
	if err != nil {
		return err
	}
	defer src.Release()
	t.st.dev.Copy(t.view(), src.view())
	t.st.version.Add(1)
	return nil
}

// SetFloat64s overwrites t's elements (in row-major order, any strides)
// from the host, converting each float64 once to t's dtype (its version
// goes up). The length must match.
func (t *Tensor) SetFloat64s(data []float64) error {
	t.mustLive("SetFloat64s")
	if len(data) != t.Len() {
		return errorf("SetFloat64s", "%d values for %s", len(data), t.describe())
	}
	src, err := FromFloat64(t.st.dev, data, t.shape, memory.Temporary)
	if err != nil {
		return err
	}
	defer src.Release()
	t.st.dev.Copy(t.view(), src.view())
	t.st.version.Add(1)
	return nil
}

// ConvertTo changes a leaf tensor's dtype in place: its elements are
// copied into new storage of dtype (rounded as Copy rounds, under the same
// allocator category) and the old storage is freed. It is how a weight
// that no longer trains drops its F32 copy (a frozen parameter held in the
// autocast dtype), and how a frozen weight is quantized (NF4, Int8:
// device.Quantize, refused for a tensor that requires grad, since a
// quantized weight never trains) or dequantized again (to a float
// dtype). The peak is the old storage plus the new. A tensor made by an
// op, one with a gradient, or one whose storage other handles share
// (views) is refused, as is a non-finite element of one being quantized.
func (t *Tensor) ConvertTo(dtype DType) error {
	t.mustLive("ConvertTo")
	switch {
	case t.dtype == dtype:
		return nil
	case t.node != nil:
		return errorf("ConvertTo", "%s is the result of an op; only leaves convert", t.describe())
	case t.grad != nil:
		return errorf("ConvertTo", "%s has a gradient", t.describe())
	case t.st.refs.Load() != 1:
		return errorf("ConvertTo", "%s shares its storage with %d other handles", t.describe(), t.st.refs.Load()-1)
	case dtype.IsQuantized() && t.requiresGrad:
		return errorf("ConvertTo", "%s requires grad: only a frozen weight is quantized (to %v)", t.describe(), dtype)
	case dtype.IsQuantized() && !t.dtype.IsFloat(), t.dtype.IsQuantized() && !dtype.IsFloat():
		return errorf("ConvertTo", "%s cannot convert to %v: quantizing takes a float tensor, and a quantized one converts to a float dtype", t.describe(), dtype)
	case dtype.IsQuantized() && !t.IsContiguous():
		return errorf("ConvertTo", "%s is not contiguous", t.describe())
	}
	if t.dtype.IsQuantized() {
		n := t.dequantized(dtype, t.Category())
		t.adopt(n)
		return nil
	}
	if dtype.IsQuantized() {
		n, err := alloc(t.st.dev, dtype, t.shape, t.Category())
		if err != nil {
			return err
		}
		if err := device.Quantize(t.st.dev, n.view(), t.view()); err != nil {
			n.Release()
			return errorf("ConvertTo", "quantizing %s to %v: %v", t.describe(), dtype, err)
		}
		t.adopt(n)
		return nil
	}
	n, err := New(t.st.dev, dtype, t.shape, t.Category())
	if err != nil {
		return err
	}
	t.st.dev.Copy(n.view(), t.view())
	t.adopt(n) // n takes the old storage and frees it
	return nil
}

// adopt gives t the storage, dtype and layout of n, a new handle nobody
// else holds, and frees t's old storage through n.
func (t *Tensor) adopt(n *Tensor) {
	t.st, n.st = n.st, t.st
	t.strides, t.offset, t.dtype = n.strides, n.offset, n.dtype
	n.strides, n.offset, n.dtype = nil, 0, DType(0)
	n.Release()
}
