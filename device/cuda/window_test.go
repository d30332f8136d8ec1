//go:build cuda || cudaemu

package cuda

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
)

// windowStarts are the starts of b rows of t queries under a sliding
// window of w keys (0: none), the rows packing examples of 3, 30 and the
// rest of the row when packed: max(the example's start, i-w+1).
func windowStarts(b, t, w int, packed bool) []int32 {
	st := make([]int32, b*t)
	for r := range b {
		for i := range t {
			s := 0
			if packed {
				switch {
				case i >= 33:
					s = 33
				case i >= 3:
					s = 3
				}
			}
			if w > 0 {
				s = max(s, i-w+1)
			}
			st[r*t+i] = int32(s)
		}
	}
	return st
}

// TestAttentionWindowSoftcap runs sliding windows (device.Attention.Starts
// made from a window, with and without example boundaries) and soft-capped
// scores (device.Attention.Softcap) through the GPU's kernels — the
// tensor-core ones for f16 and bf16 where the GPU has them, the CUDA-core
// ones (the device told it has compute capability 7.5), the slot kernels
// for heads of 160 — and compares them with the CPU's, for the shapes of
// TestAttentionTiles: heads of 16, 64, 96, 128 and 160, sequences that end
// inside a tile, windows of 1 key, inside a tile and across tiles.
func TestAttentionWindowSoftcap(t *testing.T) {
	d := newTestDevice(t)
	core := newTestDevice(t)
	core.major, core.minor = 7, 5 // before its first kernel: the CUDA-core kernels
	ref := cpu.New()
	shapes := []struct{ b, h, t, d int }{{1, 2, 77, 64}, {2, 1, 45, 96}, {1, 1, 37, 160}, {1, 3, 130, 16}, {1, 1, 70, 128}}
	if !Emulated {
		shapes = append(shapes, struct{ b, h, t, d int }{4, 6, 1024, 64}, struct{ b, h, t, d int }{2, 4, 512, 128})
	}
	configs := []struct {
		window  int
		packed  bool
		softcap float64
		dropout float64
	}{{1, false, 0, 0}, {7, true, 0, 0}, {40, false, 1.5, 0.2}, {0, false, 1.5, 0}, {23, true, 0.8, 0}}
	for _, c := range shapes {
		for _, dt := range []device.DType{device.F32, device.BF16, device.F16} {
			for _, cf := range configs {
				name := fmt.Sprintf("%dx%dx%dx%d/%v/window%d/packed%v/softcap%v/dropout%v", c.b, c.h, c.t, c.d, dt, cf.window, cf.packed, cf.softcap, cf.dropout)
				t.Run(name, func(t *testing.T) {
					a := device.Attention{Scale: 4 / math.Sqrt(float64(c.d)), Dropout: cf.dropout, Seed: 3, Softcap: cf.softcap}
					if cf.window > 0 || cf.packed {
						a.Starts = windowStarts(c.b, c.t, cf.window, cf.packed)
					}
					want := runAttention(t, ref, dt, c.b, c.h, c.t, c.d, a)
					a.Tiled = device.AttentionTiled(d, dt, c.d)
					for _, dev := range []*Device{d, core} {
						got := runAttention(t, dev, dt, c.b, c.h, c.t, c.d, a)
						for i, n := range []string{"out", "lse", "dq", "dk", "dv"} {
							name := fmt.Sprintf("%s (compute capability %d.%d)", n, dev.major, dev.minor)
							if cf.window == 1 && (n == "dq" || n == "dk") {
								// Each query sees itself alone, its
								// probability 1: dS = dP - Δ is 0 but for
								// rounding, on either device.
								for j, g := range got[i] {
									if math.Abs(g) > 1e-5 {
										t.Fatalf("%s[%d] = %v, want 0 but for rounding", name, j, g)
									}
								}
								continue
							}
							compareRMS(t, name, got[i], want[i], attentionTolerance(dt, n))
						}
					}
				})
			}
		}
	}
}

// TestAttentionWindowCost: under a window of W keys the tiled kernels
// touch O(T·W) of global memory, not O(T²): forward and dq start at the
// key tile of a query tile's first start, and dk and dv stop at the first
// query tile that starts after their key tile (starts never decrease
// along a row). On the emulator, which counts each kernel's global loads
// and stores, a window of 16 keys at 2,048 tokens must take under 35% of
// the accesses of no window in each kernel (a tenth to a quarter of them:
// each tile's own loads and stores are the same); had dk and dv gone on
// computing the row statistics of every later query tile, as they once
// did, theirs would be about two thirds. Grouped heads (2 query heads
// over 1 key head: dk and dv run both heads' query tiles) stop alike.
func TestAttentionWindowCost(t *testing.T) {
	d := newTestDevice(t)
	if !d.CountsLaunches() {
		t.Skip("the GPU counts no accesses (the emulator does)")
	}
	core := newTestDevice(t)
	core.major, core.minor = 7, 5
	const b, tt, dd, w = 1, 2048, 16, 16
	for _, c := range []struct {
		dev   *Device
		dt    device.DType
		h, kv int
	}{{core, device.F32, 1, 0}, {d, device.BF16, 1, 0}, {d, device.BF16, 2, 1}} {
		t.Run(fmt.Sprintf("%v/compute-capability-%d.%d/heads-%d-kv-%d", c.dt, c.dev.major, c.dev.minor, c.h, c.kv), func(t *testing.T) {
			accesses := func(starts []int32) map[string]int64 {
				a := device.Attention{Scale: 0.25, Starts: starts, Tiled: true}
				c.dev.ResetLaunchCounts()
				runGroupedAttention(t, c.dev, c.dt, attentionCase{b, c.h, tt, dd, c.kv}, a)
				n := map[string]int64{}
				for _, k := range c.dev.LaunchCounts().Kernels {
					if strings.HasPrefix(k.Name, "k_flash") {
						n[k.Name] += k.Accesses
					}
				}
				return n
			}
			full, windowed := accesses(nil), accesses(windowStarts(b, tt, w, false))
			if len(full) != 3 {
				t.Fatalf("flash kernels launched: %v, want forward, dk and dv, dq", full)
			}
			var counts []string
			for name, n := range full {
				r := float64(windowed[name]) / float64(n)
				if r >= 0.35 {
					t.Errorf("%s: a window of %d keys at %d tokens takes %.3f of the accesses of none (%d of %d), want under 0.35", name, w, tt, r, windowed[name], n)
				}
				counts = append(counts, fmt.Sprintf("%s %d of %d (%.3f)", name, windowed[name], n, r))
			}
			slices.Sort(counts)
			t.Logf("accesses with a window of %d keys of those without: %s", w, strings.Join(counts, ", "))
		})
	}
}
