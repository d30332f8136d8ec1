package device

import (
	"fmt"
	"math"
	"slices"
)

// AttentionKernels compute causal multi-head attention without the
// [B, H, T, T] scores or probabilities: each block of query rows meets the
// keys up to its diagonal, its softmax is normalised in place, and only
// the output and one log-sum-exp per row are kept; backward recomputes
// each block's probabilities from q, k and the log-sum-exps. The tensor
// package uses them when a device has them (Has(d, CapAttention)) and
// otherwise composes the same attention from CausalScores, Softmax,
// Dropout and CausalMatMul, whose backward is the autograd graph of that
// composition.
type AttentionKernels interface {
	// CausalAttention writes, for every batch b and head h,
	// out = dropout(softmax(scale·q·kᵀ, causal))·v and lse, the natural
	// log of each row's softmax denominator including its maximum
	// (F32, or F64 for F64 inputs; [B, H, T] contiguous). q and out are
	// [B, H, T, D] views, k and v [B, KV, T, D] views with KV dividing H
	// (grouped-query attention: query head h reads key and value head
	// h/(H/KV), as Hugging Face's repeat_kv spreads them; KV = H is
	// multi-head attention), all of one dtype with unit last stride. The
	// dropout mask of probability (b, h, i, j) (h the query head) is element
	// ((b·H+h)·T+i)·T+j of Dropout's stream for a.Seed — the mask the
	// composed path draws on its contiguous [B, H, T, T] probabilities —
	// so a checkpointed recompute and the composed path drop the same
	// ones. With a.Starts the softmax of row i runs over keys
	// Starts[b·T+i]…i only (the others' probabilities are 0): example
	// boundaries and sliding windows alike. With a.Softcap = c > 0 each
	// score s = scale·q·k becomes c·tanh(s/c) before the mask and the
	// softmax (and lse is that of the capped scores). The kernel takes
	// a.Workspace bytes of temporaries from the device's allocator for
	// the call.
	CausalAttention(out, lse, q, k, v View, a Attention)
	// CausalAttentionBackward writes dq, dk and dv (views like q, k and
	// v) from dout and what the forward kept. Under a.Softcap the
	// scores' gradient goes through the cap: dS·(1 − tanh²(s/c)). With
	// KV < H, dk and dv of key and value head g are the sums over the
	// query heads of its group, g·H/KV…(g+1)·H/KV-1, in a fixed order
	// (each device documents its own), so that the results do not depend
	// on scheduling.
	CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v View, a Attention)
}

// Attention are the parameters of one attention call.
type Attention struct {
	Scale   float64 // of the scores, usually 1/√D
	Dropout float64 // probability of dropping a probability; 0: none
	Seed    uint64  // dropout stream
	// Starts, when not nil, keeps each query inside its example when a
	// row packs several end to end: query i of batch b attends the keys
	// j with Starts[b·T+i] <= j <= i, the row where its example begins
	// (B·T values, each in [0, i], non-decreasing along each row of the
	// batch). A sliding window of W keys is the same thing: row i starts
	// at max(its example's start, i-W+1) (tensor's Attention makes these
	// starts). The kernels skip the keys before a block's earliest start,
	// and backward's key tiles stop at the first query tile that starts
	// after them, so a window of W costs O(T·W), not O(T²). nil: every
	// key up to i.
	Starts []int32
	// Softcap, when above 0, caps every score softly before the mask and
	// the softmax: s = scale·q·k becomes Softcap·tanh(s/Softcap) (Gemma
	// 2's attn_logit_softcapping). 0: none, and the kernels run exactly
	// as without the field.
	Softcap float64
	// Tiled says the caller found the device's kernels tiled for these
	// heads (AttentionTiled): they then take the StartsBytes of
	// Workspace only, their scores living in on-chip tiles. Callers set
	// it from the device as they see it (behind Without, say), so that
	// the meta device standing for another accounts what that one takes.
	Tiled bool
}

// Workspace is the temporary bytes one fused attention call with a's
// parameters takes for q of shape [B, H, T, D], kvHeads heads of keys and
// values and dtype dt: AttentionWorkspace, after StartsBytes for a copy
// of a.Starts at the front (where a device whose memory the host cannot
// address reads them; the CPU reads them in place and takes the bytes
// all the same, so that every device takes what the meta device
// accounts). With a.Tiled it is StartsBytes alone.
func (a Attention) Workspace(shape []int, kvHeads int, dt DType, backward bool) int64 {
	if a.Tiled {
		return a.StartsBytes(shape)
	}
	return a.StartsBytes(shape) + AttentionWorkspace(shape, kvHeads, dt, backward)
}

// StartsBytes is the front of a.Workspace that holds the starts: one
// int32 per row of the batch (B·T), rounded up to 8 bytes so that the
// accumulators after it stay aligned; 0 without starts.
func (a Attention) StartsBytes(shape []int) int64 {
	if a.Starts == nil {
		return 0
	}
	return (int64(shape[0])*int64(shape[2])*4 + 7) &^ 7
}

// Check panics unless a is a consistent call for q of shape
// [B, H, T, D] and k and v of shape [B, KV, T, D] with KV dividing H
// (CheckHeads): its starts as CheckStarts says, and a.Softcap 0 or a
// finite number above 0. The kernels call it first (the tensor package
// builds valid calls).
func (a Attention) Check(q, k, v []int) {
	a.CheckShapes(q, k, v)
	a.CheckStarts(q)
}

// CheckShapes is Check without reading the starts (only their number):
// the check of a device that runs no kernel (the meta device), for which
// reading B·T starts at every traced call of a long-context plan would be
// most of the plan's time.
func (a Attention) CheckShapes(q, k, v []int) {
	CheckHeads(q, k, v)
	if a.Softcap != 0 && !(a.Softcap > 0 && !math.IsInf(a.Softcap, 1)) {
		panic(fmt.Sprintf("device: attention soft cap %v: want 0 (none) or a finite number above 0", a.Softcap))
	}
	if a.Starts != nil && len(a.Starts) != q[0]*q[2] {
		panic(fmt.Sprintf("device: attention starts: %d values for [B %d, T %d]", len(a.Starts), q[0], q[2]))
	}
}

// CheckHeads panics unless q is [B, H, T, D] and k and v are both
// [B, KV, T, D] with KV dividing H: the shapes AttentionKernels take.
func CheckHeads(q, k, v []int) {
	ok := len(q) == 4 && len(k) == 4 && slices.Equal(k, v) && k[1] > 0 && q[1]%k[1] == 0 &&
		k[0] == q[0] && k[2] == q[2] && k[3] == q[3]
	if !ok {
		panic(fmt.Sprintf("device: attention: q %v, k %v and v %v: want q [B, H, T, D] and k and v [B, KV, T, D] with KV dividing H", q, k, v))
	}
}

// Groups is the query heads that share one key and value head: H/KV for
// q of shape [B, H, T, D] and kvHeads = KV (0: KV = H).
func Groups(shape []int, kvHeads int) int {
	if kvHeads <= 0 {
		return 1
	}
	return shape[1] / kvHeads
}

// CheckStarts panics unless a.Starts is nil or holds B·T starts for q of
// shape [B, H, T, D], each in [0, i] for its row i and none before the
// start of the row above it in the same batch row (the tiled kernels'
// backward relies on it: once a tile of queries starts after a tile of
// keys, every later tile does): the kernels' guard against an
// inconsistent call.
func (a Attention) CheckStarts(shape []int) {
	if a.Starts == nil {
		return
	}
	b, t := shape[0], shape[2]
	if len(a.Starts) != b*t {
		panic(fmt.Sprintf("device: attention starts: %d values for [B %d, T %d]", len(a.Starts), b, t))
	}
	for r, s := range a.Starts {
		i := r % t
		if s < 0 || int(s) > i {
			panic(fmt.Sprintf("device: attention starts: row %d of batch %d starts at %d, outside [0, %d]", i, r/t, s, i))
		}
		if i > 0 && s < a.Starts[r-1] {
			panic(fmt.Sprintf("device: attention starts: row %d of batch %d starts at %d, before row %d's %d (starts never decrease along a row)", i, r/t, s, i-1, a.Starts[r-1]))
		}
	}
}

// CapAttention names AttentionKernels for Has and Without.
const CapAttention = "attention"

// TiledAttention is the capability of attention kernels that, for some
// heads, keep each tile of scores and probabilities in on-chip memory
// and normalise them online (FlashAttention's tiling: the CUDA device's
// k_flash kernels), so that a call needs no workspace beyond the copy of
// its starts. The slot kernels (the CPU's) hold a block's [Br, T] scores
// per slot instead: AttentionWorkspace.
type TiledAttention interface {
	// AttentionTiled reports whether the fused kernels run heads of d
	// elements of dtype dt tiled.
	AttentionTiled(dt DType, d int) bool
}

// CapTiledAttention names TiledAttention for Has and Without.
const CapTiledAttention = "tiled_attention"

// TiledHeadDim is the longest head the tiled kernels take: the CUDA
// device's tiles (shared memory of 48 KiB a block) hold heads of up to
// 128 elements, in f32, f16 or bf16. The meta device, standing for it in
// plans, answers AttentionTiled by this rule.
const TiledHeadDim = 128

// AttentionTiled reports whether d's fused attention kernels (it must
// have them: AttentionOf) run heads of headDim elements of dtype dt
// tiled, taking only the starts' bytes of workspace (Attention.Tiled).
func AttentionTiled(d Device, dt DType, headDim int) bool {
	if AttentionOf(d) == nil {
		return false
	}
	t, ok := capable(d, CapTiledAttention).(TiledAttention)
	return ok && t.AttentionTiled(dt, headDim)
}

// AttentionBlock is the number of query rows a fused attention kernel
// treats at a time, and AttentionSlots the most (batch, head) pairs whose
// workspaces exist at once: together they fix the kernels' temporary
// memory, so that the meta device accounts it exactly.
const (
	AttentionBlock = 128
	AttentionSlots = 16
)

// AttentionWorkspace is the temporary bytes one fused attention call
// takes for q of shape [B, H, T, D], kvHeads heads of keys and values
// (0: H) and dtype dt (backward selects the backward kernel). Per slot,
// in f32 (f64 for F64): a block's scores ([Br, T]) and output rows
// ([Br, D]), and for 16-bit inputs the block's probabilities rounded to
// dt ([Br, T]); backward adds the probabilities' gradient ([Br, T]), the
// head's dk and dv accumulators ([T, D] each), a row of dout ([D]) and,
// for 16-bit inputs, the gradient rounded to dt ([Br, T]). With Br = 128,
// T = 256 and D = 64 that is 8.5 MiB for 16 slots of bf16 backward (3.5
// MiB forward). Grouped heads (kvHeads < H) of 16-bit inputs add, once
// per backward call, the dk and dv of the group being summed ([T, D]
// each, f32): the CPU adds the query heads' partial dk and dv there in
// head order before rounding their sum to dt once.
func AttentionWorkspace(shape []int, kvHeads int, dt DType, backward bool) int64 {
	b, h, t, d := shape[0], shape[1], shape[2], shape[3]
	slots := int64(min(b*h, AttentionSlots))
	br := int64(min(AttentionBlock, t))
	T, D := int64(t), int64(d)
	acc, low := br*T+br*D, br*T
	if backward {
		acc += br*T + 2*T*D + D
		low += br * T
	}
	n := acc * int64(accumulator(dt).Size())
	if dt.IsLowPrecision() {
		n += low * int64(dt.Size())
	}
	return slots*n + GroupSumBytes(shape, kvHeads, dt, backward)
}

// GroupSumBytes is the part of AttentionWorkspace that sums grouped
// heads' dk and dv: 2·T·D accumulators (f32) for the backward of 16-bit
// heads with kvHeads < H, else 0 (f32 and f64 sums accumulate in dk and dv
// themselves).
func GroupSumBytes(shape []int, kvHeads int, dt DType, backward bool) int64 {
	if !backward || !dt.IsLowPrecision() || Groups(shape, kvHeads) == 1 {
		return 0
	}
	return 2 * int64(shape[2]) * int64(shape[3]) * int64(accumulator(dt).Size())
}
