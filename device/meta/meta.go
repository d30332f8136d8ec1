package meta

import (
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Device is the meta device.
type Device struct {
	mem *memory.Allocator
}

var _ device.Device = (*Device)(nil)

// Storeless: the meta device keeps no values (device.StoresValues).
func (d *Device) Storeless() {}

// New returns a meta device that refuses to hold more than capacity bytes
// (0: unlimited), like a real device of that size.
func New(capacity int64) *Device {
	return &Device{mem: memory.New(memory.NewCountingRaw(capacity, "meta"))}
}

// Name is "meta".
func (d *Device) Name() string { return "meta" }

// Memory returns the device's caching allocator.
func (d *Device) Memory() *memory.Allocator { return d.mem }

// Alloc accounts size bytes under cat.
func (d *Device) Alloc(size int64, cat memory.Category) (device.Buffer, error) {
	b, err := d.mem.Alloc(size, cat)
	return device.Buffer{Block: b}, err
}

// Free returns the bytes to the cache.
func (d *Device) Free(b device.Buffer) { d.mem.Free(b.Block) }

// Write does nothing: the device stores nothing.
func (d *Device) Write(device.Buffer, int64, []byte) {}

// Read zeroes dst.
func (d *Device) Read(dst []byte, _ device.Buffer, _ int64) { clear(dst) }

// The kernels do nothing; AllFinite reports true.

func (d *Device) Fill(device.View, float64)                               {}
func (d *Device) Copy(_, _ device.View)                                   {}
func (d *Device) Unary(device.UnaryOp, device.View, device.View, float64) {}
func (d *Device) UnaryBackward(device.UnaryOp, device.View, device.View, device.View, device.View, float64) {
}
func (d *Device) Binary(device.BinaryOp, device.View, device.View, device.View)              {}
func (d *Device) Reduce(device.ReduceOp, device.View, device.View)                           {}
func (d *Device) Gemm(device.Gemm)                                                           {}
func (d *Device) Softmax(device.View, device.View, bool)                                     {}
func (d *Device) SoftmaxBackward(device.View, device.View, device.View, bool)                {}
func (d *Device) LayerNorm(_, _, _, _, _, _, _ device.View, _ float64)                       {}
func (d *Device) LayerNormBackward(_, _, _, _, _, _, _, _ device.View)                       {}
func (d *Device) Gather(_, _, _ device.View)                                                 {}
func (d *Device) ScatterAdd(_, _, _ device.View)                                             {}
func (d *Device) Im2Col(_, _ device.View, _ device.ConvGeom)                                 {}
func (d *Device) Col2Im(_, _ device.View, _ device.ConvGeom)                                 {}
func (d *Device) Pool(device.PoolOp, device.View, device.View, device.View, device.ConvGeom) {}
func (d *Device) PoolBackward(device.PoolOp, device.View, device.View, device.View, device.ConvGeom) {
}
func (d *Device) CrossEntropy(_, _, _ device.View, _ int, _ float64)                {}
func (d *Device) CrossEntropyBackward(_, _, _, _ device.View, _ int, _ float64)     {}
func (d *Device) Dropout(_, _ device.View, _ float64, _ uint64)                     {}
func (d *Device) Random(device.View, device.Distribution, float64, float64, uint64) {}
func (d *Device) MaskedFill(_, _, _ device.View, _ float64)                         {}
func (d *Device) CausalFill(_, _ device.View, _ float64)                            {}
func (d *Device) AllFinite(device.View) bool                                        { return true }
func (d *Device) AdamStep(_, _, _, _ device.View, _ device.AdamHyper)               {}
func (d *Device) AdamSteps(_, _, _, _ []device.View, _ device.AdamHyper)            {}
func (d *Device) SGDStep(_, _, _ device.View, _ device.SGDHyper)                    {}
func (d *Device) Adam8bitStep(_, _, _, _, _, _ device.View, _ device.AdamHyper)     {}
func (d *Device) StochasticRoundBF16(_, _ device.View, _ uint64, _ int64)           {}

// The quantized kernels compute nothing either: the CPU's product and
// dequantization take no device memory, and quantizing takes none on any
// device (plans for a device without the fused product hide it, so that
// the composed product's tile temporaries are accounted).

func (d *Device) QuantGemm(device.Gemm)                       {}
func (d *Device) Dequantize(_, _ device.View, _, _, _, _ int) {}
func (d *Device) Quantize(_, _ device.View) error             { return nil }

// CausalAttention takes and returns the workspace the CPU kernel takes
// (the starts of example boundaries or of a sliding window included:
// a.Workspace; a soft cap takes none), so that plans account it. It
// checks the call's shapes, not its starts' values (a.CheckShapes).
func (d *Device) CausalAttention(_, _, q, k, v device.View, a device.Attention) {
	a.CheckShapes(q.Shape, k.Shape, v.Shape)
	d.workspace(a.Workspace(q.Shape, k.Shape[1], q.DType, false))
}

// CausalAttentionBackward accounts like CausalAttention (grouped heads'
// sums included: device.GroupSumBytes).
func (d *Device) CausalAttentionBackward(_, _, _, _, _, _, q, k, v device.View, a device.Attention) {
	a.CheckShapes(q.Shape, k.Shape, v.Shape)
	d.workspace(a.Workspace(q.Shape, k.Shape[1], q.DType, true))
}

// AttentionTiled is device.TiledAttention as the device with tiled
// kernels (CUDA's) answers it: float heads other than F64 of up to
// device.TiledHeadDim elements. A plan for a device without them (the
// CPU) hides the capability (device.Lacking), and the kernels above then
// take the slot kernels' workspace.
func (d *Device) AttentionTiled(dt device.DType, hd int) bool {
	return dt.IsFloat() && dt != device.F64 && hd <= device.TiledHeadDim
}

// workspace allocates and frees n bytes of temporaries, as a kernel that
// takes a workspace does: the peak sees them (none for n = 0).
func (d *Device) workspace(n int64) {
	if n == 0 {
		return
	}
	b, err := d.mem.Alloc(n, memory.Temporary)
	if err != nil {
		panic(err)
	}
	d.mem.Free(b)
}
