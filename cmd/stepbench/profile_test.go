package main

import (
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cuda"
)

// TestReportProfile checks -kernels' GPU table: each operation in its
// group, per step, and the compute stream's idle time.
func TestReportProfile(t *testing.T) {
	p := cuda.Profile{
		Ops: []*cuda.OpTime{
			{Name: "gemm bf16·bf16→bf16 2048×4096×4096", Calls: 4, Time: 40 * time.Millisecond},
			{Name: "k_dequant", Calls: 4, Time: 8 * time.Millisecond},
			{Name: "gemm bf16·bf16→f32 2048×32×4096", Calls: 4, Time: 4 * time.Millisecond},
			{Name: "k_flash_fwd_tc_bf16", Calls: 2, Time: 6 * time.Millisecond},
			{Name: "k_flash_bwd_kv_tc_bf16", Calls: 2, Time: 10 * time.Millisecond},
			{Name: "DtoH", Calls: 2, Time: 2 * time.Millisecond},
			{Name: "HtoD", CopyStream: true, Calls: 2, Time: 12 * time.Millisecond},
			{Name: "k_layernorm_bf16", Calls: 2, Time: 2 * time.Millisecond},
		},
		Span:      100 * time.Millisecond,
		Busy:      72 * time.Millisecond,
		HostWaits: []cuda.HostWait{{Name: "cuMemcpyDtoH", Calls: 2, Time: 30 * time.Millisecond}},
	}
	var b strings.Builder
	reportProfile(&b, p, 2, 3)
	got := b.String()
	for _, want := range []string{
		"GPU time per step by group (share of the compute stream's span, 50.00 ms a step):",
		"      4.00   8.0%        2  nf4/int8 dequantization (k_dequant)",
		"      2.00   4.0%        2  products with a side of at most 64 (LoRA's rank)",
		"     20.00  40.0%        2  products, every side over 64 (the base's and the head's)",
		"      3.00   6.0%        1  attention forward",
		"      5.00  10.0%        1  attention backward",
		"      6.00  12.0%        1  copies on the copy stream (beside the compute stream)",
		"      1.00   2.0%        1  copies and fills on the compute stream",
		"      1.00   2.0%        1  other kernels (norms, casts, pointwise, loss, optimizer)",
		"     14.00  28.0%           compute stream idle",
		"     15.00               1  cuMemcpyDtoH",
		"the 3 longest operations per step (of 8):",
		"      6.00  12.0%        1  HtoD (copy stream)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}
