package devicetest

import "github.com/memfit/memfit/device"

// Grouped-query attention: keys and values of KV heads dividing the
// queries' H (device.AttentionKernels: query head h reads key and value
// head h/(H/KV), and dk and dv sum their group's query heads). Each
// configuration runs forward and backward through attentionWindowCase
// (heads viewed inside one projection's [B, T, (H + 2·KV)·D] rows, as a
// decoder's AttendRows reads them; every call's workspace checked against
// a.Workspace) and is checked against attentionRef: multi-query heads
// (KV = 1), KV = 2 and KV = H/2, with windows, examples, soft caps and
// dropout (numbered by query head), on heads of 8, of 64, 80 and 128 (the
// tiled kernels' two tile sizes) and of 256 (the slot kernels), and more
// (batch, head) pairs than device.AttentionSlots (the CPU's workers take
// them in turn and add a group's partial dk and dv in head order).
func init() {
	cases = append(cases, kcase{"AttentionGrouped", append(floatTypes, device.F64), func(e *env, dt device.DType) {
		for _, c := range attentionGroupedConfigs {
			attentionWindowCase(e, dt, c)
		}
	}})
}

var attentionGroupedConfigs = []attentionWindowConfig{
	{name: "4 heads over 1", b: 2, h: 4, kv: 1, t: 150, d: 8, scale: 0.35},
	{name: "4 heads over 2, dropout", b: 2, h: 4, kv: 2, t: 150, d: 8, scale: 0.35, dropout: 0.25},
	{name: "6 heads over 3, soft cap, window 33 with examples, dropout", b: 2, h: 6, kv: 3, t: 150, d: 8, window: 33, segments: windowSegments, scale: 1.5, softcap: 1.5, dropout: 0.25},
	{name: "4 heads over 2, window 1", b: 1, h: 4, kv: 2, t: 150, d: 8, window: 1, scale: 0.35},
	{name: "16 heads over 4, 32 pairs", b: 2, h: 16, kv: 4, t: 40, d: 8, scale: 0.35, dropout: 0.25},
	{name: "8 heads over 2, one block, examples", b: 1, h: 8, kv: 2, t: 70, d: 16, segments: [][]int{{30, 40}}, scale: 0.3},
	{name: "heads of 64, 3 over 1, soft cap, window 50", b: 1, h: 3, kv: 1, t: 150, d: 64, window: 50, scale: 0.25, softcap: 1},
	{name: "heads of 80, 2 over 1, soft cap, window 70 with examples", b: 2, h: 2, kv: 1, t: 150, d: 80, window: 70, segments: windowSegments, scale: 0.2, softcap: 1},
	{name: "heads of 128, 4 over 2, window 65, dropout", b: 1, h: 4, kv: 2, t: 150, d: 128, window: 65, scale: 0.15, dropout: 0.25},
	{name: "heads of 256, 2 over 1, soft cap, window 30 with examples, dropout", b: 2, h: 2, kv: 1, t: 150, d: 256, window: 30, segments: windowSegments, scale: 0.1, softcap: 1, dropout: 0.25},
}
