//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda/internal/cu"
	"github.com/memfit/memfit/memory"
)

var _ device.AttentionKernels = (*Device)(nil)

var _ device.TiledAttention = (*Device)(nil)

// AttentionTiled is device.TiledAttention: the tiled kernels (k_flash_*)
// take f32, f16 and bf16 heads of up to device.TiledHeadDim elements
// (flashFor).
func (d *Device) AttentionTiled(dt device.DType, hd int) bool {
	_, ok := flashFor(dt, hd, d.tensorCores())
	return ok
}

// tensorCores reports whether the GPU runs mma.sync on bf16 and f16
// (compute capability 8.0 and later; the emulator reports 8.0).
func (d *Device) tensorCores() bool { return d.major >= 8 }

// CausalAttention is device.AttentionKernels' forward: kernels.cu's tiled
// k_flash_fwd where the caller found the heads tiled (a.Tiled, from
// AttentionTiled: f32, f16 and bf16 heads, flashFor; f16 and bf16 on
// tensor cores where the GPU has them, k_flash_fwd_tc), else k_attention,
// one block per workspace slot; nothing of T×T size either way. Both take
// a.Workspace bytes from the allocator, as the contract says (plans count
// them): the tiled kernels only the copy of a.Starts. Starts (example
// boundaries, sliding windows) and a.Softcap are the kernels' arguments
// (kernels.cu: att_cap, fa_cap, fa_prob). k and v may have fewer heads
// than q (KV dividing H: grouped-query attention), query head h reading
// key and value head h/(H/KV) (att_kv_head).
func (d *Device) CausalAttention(out, lse, q, k, v device.View, a device.Attention) {
	a.Check(q.Shape, k.Shape, v.Shape)
	ws, starts, slot, grid := d.attentionWorkspace(q, k, a, false)
	defer d.freeWorkspace(ws)
	if f, ok := d.tiles(q, a); ok {
		g := attentionShape(q, k).heads(out).op(lse).heads(q).heads(k).heads(v).f64(a.Scale).f64(a.Dropout).u64(a.Seed).op(starts).f64(a.Softcap)
		d.launchBlock("k_flash_fwd"+f.suffix, flashGrid(q.Shape[0]*q.Shape[1], q.Shape[2], f.fwdRows), f.threads(), g)
		return
	}
	g := attentionShape(q, k).heads(out).op(lse).heads(q).heads(k).heads(v).op(ws).i64(slot).f64(a.Scale).f64(a.Dropout).u64(a.Seed).op(starts).f64(a.Softcap)
	d.launch("k_attention"+computeSuffix(q), grid, g)
}

// attentionShape is the kernels' first arguments: B, H, KV, T and D.
func attentionShape(q, k device.View) *args {
	return new(args).i64(int64(q.Shape[0])).i64(int64(q.Shape[1])).i64(int64(k.Shape[1])).i64(int64(q.Shape[2])).i64(int64(q.Shape[3]))
}

// CausalAttentionBackward is device.AttentionKernels' backward: the tiled
// k_flash_bwd_kv (dk and dv, one block per key tile of each key head,
// running the query heads of its group in order) then k_flash_bwd_q (dq,
// one block per query tile) under a.Tiled, or k_attention_bwd (one block
// per slot, taking (batch, key head) pairs in turn).
func (d *Device) CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v device.View, a device.Attention) {
	a.Check(q.Shape, k.Shape, v.Shape)
	ws, starts, slot, grid := d.attentionWorkspace(q, k, a, true)
	defer d.freeWorkspace(ws)
	if f, ok := d.tiles(q, a); ok {
		tail := func(g *args) *args {
			return g.heads(dout).heads(out).op(lse).heads(q).heads(k).heads(v).f64(a.Scale).f64(a.Dropout).u64(a.Seed).op(starts).f64(a.Softcap)
		}
		d.launchBlock("k_flash_bwd_kv"+f.suffix, flashGrid(q.Shape[0]*k.Shape[1], q.Shape[2], f.bwdCols), f.threads(), tail(attentionShape(q, k).heads(dk).heads(dv)))
		d.launchBlock("k_flash_bwd_q"+f.suffix, flashGrid(q.Shape[0]*q.Shape[1], q.Shape[2], f.bwdRows), f.threads(), tail(attentionShape(q, k).heads(dq)))
		return
	}
	g := attentionShape(q, k).heads(dq).heads(dk).heads(dv).heads(dout).heads(out).op(lse).heads(q).heads(k).heads(v).
		op(ws).i64(slot).f64(a.Scale).f64(a.Dropout).u64(a.Seed).op(starts).f64(a.Softcap)
	d.launch("k_attention_bwd"+computeSuffix(q), grid, g)
}

// tiles returns the tiled kernels' tiles under a.Tiled, or false where
// the slot kernels run. A call marked tiled for heads the tiled kernels
// do not take is a caller's bug (it did not ask AttentionTiled).
func (d *Device) tiles(q device.View, a device.Attention) (flashTiles, bool) {
	if !a.Tiled {
		return flashTiles{}, false
	}
	f, ok := flashFor(q.DType, q.Shape[3], d.tensorCores())
	if !ok {
		panic(fmt.Sprintf("cuda: attention: %v heads of %d marked Tiled: the tiled kernels do not take them (device.AttentionTiled)", q.DType, q.Shape[3]))
	}
	return f, true
}

// launchBlock is launch with blocks of threads threads (the tiled
// kernels' own: f.threads()).
func (d *Device) launchBlock(name string, grid, threads int, a *args) {
	if grid <= 0 {
		return
	}
	f := d.kernel(name)
	d.must("launch "+name, d.w.do(func() error {
		return d.timed(name, d.compute, func() error { return cu.Launch(f, grid, threads, d.compute, a.words, a.starts) })
	}))
}

// attentionWorkspace takes a.Workspace bytes of temporaries, as the CPU
// and the meta device do. With example boundaries their front holds a
// copy of a.Starts, returned as an I32 view (else a view with no buffer,
// which the kernels read as none). The rest is returned viewed as the
// accumulator type, with the elements per slot and the grid (one block
// per slot); under a.Tiled there is no rest (and no buffer at all
// without starts). The CPU's sums of grouped 16-bit heads
// (device.GroupSumBytes) come last, taken and unused: k_attention_bwd
// sums a group in its slot's accumulators.
func (d *Device) attentionWorkspace(q, k device.View, a device.Attention, backward bool) (ws, starts device.View, slot int64, grid int) {
	acc := device.F32
	if q.DType == device.F64 {
		acc = device.F64
	}
	kv := k.Shape[1]
	bytes := a.Workspace(q.Shape, kv, q.DType, backward)
	if bytes == 0 {
		return ws, starts, 0, 0
	}
	buf, err := d.Alloc(bytes, memory.Temporary)
	if err != nil {
		panic(err)
	}
	front := a.StartsBytes(q.Shape)
	if front > 0 {
		d.Write(buf, 0, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a.Starts))), 4*len(a.Starts)))
		starts = device.View{Buf: buf, DType: device.I32, Shape: []int{len(a.Starts)}, Strides: []int{1}}
	}
	if a.Tiled {
		return device.View{Buf: buf}, starts, 0, 0
	}
	slots := min(q.Shape[0]*q.Shape[1], device.AttentionSlots)
	n := (device.AttentionWorkspace(q.Shape, kv, q.DType, backward) - device.GroupSumBytes(q.Shape, kv, q.DType, backward)) / int64(acc.Size())
	ws = device.View{Buf: buf, DType: acc, Offset: int(front) / acc.Size(), Shape: []int{int(n)}, Strides: []int{1}}
	return ws, starts, n / int64(slots), slots
}

// freeWorkspace frees what attentionWorkspace took (nothing, for a tiled
// call without starts).
func (d *Device) freeWorkspace(ws device.View) {
	if ws.Buf.Block != nil {
		d.Free(ws.Buf)
	}
}
