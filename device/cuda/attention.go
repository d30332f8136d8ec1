//go:build cuda || cudaemu

package cuda

import (
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

var _ device.AttentionKernels = (*Device)(nil)

// CausalAttention is device.AttentionKernels' forward (kernels.cu's
// k_attention): one block per workspace slot, nothing of T×T size.
func (d *Device) CausalAttention(out, lse, q, k, v device.View, a device.Attention) {
	ws, slot, grid := d.attentionWorkspace(q, false)
	defer d.Free(ws.Buf)
	g := new(args).i64(int64(q.Shape[0])).i64(int64(q.Shape[1])).i64(int64(q.Shape[2])).i64(int64(q.Shape[3])).
		heads(out).op(lse).heads(q).heads(k).heads(v).op(ws).i64(slot).f64(a.Scale).f64(a.Dropout).u64(a.Seed)
	d.launch("k_attention"+computeSuffix(q), grid, g)
}

// CausalAttentionBackward is device.AttentionKernels' backward
// (k_attention_bwd).
func (d *Device) CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v device.View, a device.Attention) {
	ws, slot, grid := d.attentionWorkspace(q, true)
	defer d.Free(ws.Buf)
	g := new(args).i64(int64(q.Shape[0])).i64(int64(q.Shape[1])).i64(int64(q.Shape[2])).i64(int64(q.Shape[3])).
		heads(dq).heads(dk).heads(dv).heads(dout).heads(out).op(lse).heads(q).heads(k).heads(v).
		op(ws).i64(slot).f64(a.Scale).f64(a.Dropout).u64(a.Seed)
	d.launch("k_attention_bwd"+computeSuffix(q), grid, g)
}

// attentionWorkspace takes device.AttentionWorkspace bytes of temporaries,
// as the CPU and the meta device do, viewed as the accumulator type, and
// returns the elements per slot and the grid (one block per slot).
func (d *Device) attentionWorkspace(q device.View, backward bool) (device.View, int64, int) {
	acc := device.F32
	if q.DType == device.F64 {
		acc = device.F64
	}
	bytes := device.AttentionWorkspace(q.Shape, q.DType, backward)
	buf, err := d.Alloc(bytes, memory.Temporary)
	if err != nil {
		panic(err)
	}
	slots := min(q.Shape[0]*q.Shape[1], device.AttentionSlots)
	n := bytes / int64(acc.Size())
	return device.View{Buf: buf, DType: acc, Shape: []int{int(n)}, Strides: []int{1}}, n / int64(slots), slots
}
