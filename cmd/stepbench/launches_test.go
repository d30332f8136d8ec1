package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda"
)

// TestLaunchTable checks -kernels' emulator table: counts per step, the
// largest traffic first, and the totals line.
func TestLaunchTable(t *testing.T) {
	c := cuda.LaunchCounts{
		Kernels: []cuda.KernelCount{
			{Name: "k_small", Launches: 4, Blocks: 8, ReadBytes: 64, WriteBytes: 64, Accesses: 40},
			{Name: "k_big", Launches: 2, Blocks: 200, ReadBytes: 8000, WriteBytes: 2000, Accesses: 1000},
		},
		Gemms:  []cuda.GemmCount{{A: device.BF16, B: device.BF16, C: device.F32, Compute: "32F", Calls: 6, FMAs: 6e6, ReadBytes: 600, WriteBytes: 300}},
		Copies: []cuda.CopyCount{{Kind: "DtoH", Calls: 2, Bytes: 16}},
	}
	var b bytes.Buffer
	newLaunchTable(c).report(&b, 2)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"calls blocks read B written B accesses MFMA kernel",
		"1 100 4000 1000 500 k_big",
		"3 300 150 3.000 gemm bf16,bf16->f32 compute 32F",
		"2 2 32 32 20 k_small",
		"1 8 0 copy DtoH",
		"per step: 3 kernel launches, 3 GEMMs; kernels and GEMMs read 4332 and write 1182 bytes (distinct 32-byte sectors per call)",
	}
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, l := range lines {
		if got := strings.Join(strings.Fields(l), " "); got != want[i] {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}
}
