package cuda

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/meta"
)

// TestFlashConfigs pins which kernels serve which heads, with and without
// tensor cores, and that every tiled kernel's shared memory fits the 48
// KiB a block gets without asking.
func TestFlashConfigs(t *testing.T) {
	for _, c := range []struct {
		dt      device.DType
		d       int
		tc      bool
		suffix  string
		threads int
	}{
		{device.F32, 8, false, "_d64", 256}, {device.BF16, 64, false, "_d64", 256}, {device.F16, 65, false, "_d128", 256},
		{device.F32, 128, false, "_d128", 256}, {device.F32, 129, false, "", 0}, {device.F64, 8, false, "", 0},
		{device.F32, 8, true, "_d64", 256}, {device.F32, 128, true, "_d128", 256},
		{device.BF16, 8, true, "_tc_d64", 128}, {device.F16, 64, true, "_tc_d64", 128},
		{device.BF16, 65, true, "_tc_d128", 128}, {device.F16, 128, true, "_tc_d128", 128},
		{device.BF16, 129, true, "", 0}, {device.F64, 64, true, "", 0},
	} {
		f, ok := flashFor(c.dt, c.d, c.tc)
		if ok != (c.suffix != "") || f.suffix != c.suffix || ok && f.threads() != c.threads {
			t.Errorf("flashFor(%v, %d, tensor cores %v) = %q over %d threads, %v; want %q over %d", c.dt, c.d, c.tc,
				f.suffix, f.threads(), ok, c.suffix, c.threads)
		}
	}
	for _, f := range append(append([]flashTiles{}, flashConfigs...), flashTCConfigs...) {
		fwd, kv, q := f.sharedBytes()
		for _, n := range []int{fwd, kv, q} {
			if n > 48<<10 {
				t.Errorf("tiles %s: %d bytes of shared memory, over 48 KiB", f.suffix, n)
			}
		}
		for _, n := range []int{f.fwdRows, f.fwdCols, f.bwdRows, f.bwdCols} {
			if n%16 != 0 || n == 0 {
				t.Errorf("tiles %s: %d is not a positive multiple of 16", f.suffix, n)
			}
		}
		// A warp owns 16 query rows in forward and dq, 16 keys in dk and dv.
		if f.tensorCores && (f.fwdRows != 16*flashTCWarps || f.bwdRows != 16*flashTCWarps || f.bwdCols != 16*flashTCWarps) {
			t.Errorf("tiles %s: rows %d and %d, keys %d; a block of %d warps owns %d", f.suffix, f.fwdRows, f.bwdRows,
				f.bwdCols, flashTCWarps, 16*flashTCWarps)
		}
	}
	// Both sets take the same heads: whether a call is tiled (and so its
	// workspace) does not depend on the GPU.
	if len(flashTCConfigs) != len(flashConfigs) {
		t.Fatalf("%d tensor-core tiles, %d CUDA-core tiles", len(flashTCConfigs), len(flashConfigs))
	}
	for i, f := range flashTCConfigs {
		if f.maxD != flashConfigs[i].maxD {
			t.Errorf("tensor-core tiles %s take heads of %d, CUDA-core tiles %s of %d", f.suffix, f.maxD,
				flashConfigs[i].suffix, flashConfigs[i].maxD)
		}
	}
}

// TestFlashGrid: one block per tile of rows of each head, at most maxGrid.
func TestFlashGrid(t *testing.T) {
	for _, c := range []struct{ heads, t, rows, want int }{
		{96, 256, 64, 384}, {96, 256, 32, 768}, {1, 70, 32, 3}, {1, 1, 64, 1}, {4096, 8192, 16, maxGrid},
	} {
		if got := flashGrid(c.heads, c.t, c.rows); got != c.want {
			t.Errorf("flashGrid(%d, %d, %d) = %d, want %d", c.heads, c.t, c.rows, got, c.want)
		}
	}
}

// TestReducePlan pins Reduce's choice of kernel, grid and row slices:
// the bias gradients of a GPT of width 384 (4096 tokens) split into
// slices that bring the column blocks (n/8) to about colsTarget.
func TestReducePlan(t *testing.T) {
	view := func(shape ...int) device.View {
		st := make([]int, len(shape))
		s := 1
		for i := len(shape) - 1; i >= 0; i-- {
			st[i] = s
			s *= shape[i]
		}
		return device.View{DType: device.F32, Shape: shape, Strides: st}
	}
	for _, c := range []struct {
		in, out       []int
		acc           int64
		kernel        string
		grid          int
		chunk, slices int64
	}{
		{[]int{4096, 384}, []int{1, 384}, 4, "k_reduce_cols", 48 * 11, 384, 11},
		{[]int{4096, 384}, []int{384}, 4, "k_reduce_cols", 48 * 11, 384, 11},
		{[]int{4096, 1152}, []int{1152}, 4, "k_reduce_cols", 144 * 4, 1024, 4},
		{[]int{4096, 1536}, []int{1536}, 4, "k_reduce_cols", 192 * 3, 1376, 3},
		{[]int{4096, 1536}, []int{1536}, 8, "k_reduce_cols", 192 * 3, 1376, 3},
		{[]int{4099, 45}, []int{45}, 4, "k_reduce_cols", 6 * 26, 160, 26},
		{[]int{3, 400, 45}, []int{3, 1, 45}, 4, "k_reduce_cols", 17 * 3, 160, 3},
		{[]int{4096, 4096}, []int{4096}, 4, "k_reduce_cols", 512, 4096, 1},
		{[]int{200, 384}, []int{384}, 4, "k_reduce_cols", 48, 200, 1},
		{[]int{4096, 384}, []int{4096, 1}, 4, "k_reduce_block", 4096, 0, 0},
		{[]int{16, 384}, []int{1, 384}, 4, "k_reduce_thread", 2, 0, 0},
		{[]int{100, 5}, []int{1, 5}, 4, "k_reduce_block", 5, 0, 0},
		{[]int{100000, 3}, []int{100000, 1}, 4, "k_reduce_thread", 391, 0, 0},
	} {
		k, p := reducePlan(newRed(view(c.out...), view(c.in...)), c.acc)
		if k != c.kernel || p.grid != c.grid || p.chunk != c.chunk || p.slices != c.slices {
			t.Errorf("%v into %v: %s over %d blocks, slices %d of %d rows; want %s over %d, slices %d of %d", c.in, c.out,
				k, p.grid, p.slices, p.chunk, c.kernel, c.grid, c.slices, c.chunk)
		}
	}
}

// TestColsSplit checks every split of a column reduction: its slices
// cover the rows (the last one not empty), take a multiple of
// colsGroups rows and at least colsSliceRows, give colsGrid's blocks each, and their partials fit the
// device's buffer; without a split, one slice of every row.
func TestColsSplit(t *testing.T) {
	for _, per := range []int64{4, 8, 16} {
		for nout := int64(1); nout <= 3000; nout += 1 + nout/7 {
			for _, nred := range []int64{0, 1, 64, 255, 256, 300, 1000, 4096, 4099, 100000} {
				p := colsSplit(nout, nred, per)
				if p.slices == 1 {
					if p.chunk != max(nred, 1) || p.grid != colsGrid(nout) {
						t.Errorf("colsSplit(%d, %d, %d) = %+v: one slice should be every row over colsGrid", nout, nred, per, p)
					}
					continue
				}
				cb := (nout + reduceCols - 1) / reduceCols
				switch {
				case p.slices < 2 || p.chunk%colsGroups != 0 || p.chunk < colsSliceRows || (p.slices-1)*p.chunk >= nred || p.slices*p.chunk < nred:
					t.Errorf("colsSplit(%d, %d, %d) = %+v: slices do not cover the rows", nout, nred, per, p)
				case int64(p.grid) != cb*p.slices:
					t.Errorf("colsSplit(%d, %d, %d) = %+v: grid is not %d column blocks per slice", nout, nred, per, p, cb)
				case nout*p.slices*per > partialsBytes:
					t.Errorf("colsSplit(%d, %d, %d) = %+v: %d bytes of partials", nout, nred, per, p, nout*p.slices*per)
				case per <= 16 && int64(p.grid) > 3*colsTarget/2:
					t.Errorf("colsSplit(%d, %d, %d) = %+v: over 3/2 of colsTarget blocks", nout, nred, per, p)
				}
			}
		}
	}
	// The largest split takes a buffer's worth of f64 layer-norm partials
	// without falling back.
	if p := colsSplit(colsTarget/2*reduceCols, 4096, 16); p.slices != 2 {
		t.Errorf("%d columns of f64 layer norm: %d slices, want 2", colsTarget/2*reduceCols, p.slices)
	}
}

// The meta device answers device.TiledAttention as the tiled kernels'
// tiles do (flashFor), so a plan for this device takes the workspace its
// calls take: none but the starts' for every head the tiled kernels run.
func TestMetaTilesAsCUDA(t *testing.T) {
	m := meta.New(0)
	for _, dt := range []device.DType{device.F32, device.F16, device.BF16, device.F64} {
		for _, d := range []int{1, 8, 64, 65, 96, 127, device.TiledHeadDim, device.TiledHeadDim + 1, 160, 256} {
			_, want := flashFor(dt, d, true)
			if got := device.AttentionTiled(m, dt, d); got != want {
				t.Errorf("heads of %d %v: the meta device says tiled %v, the tiles %v", d, dt, got, want)
			}
		}
	}
	if last := flashConfigs[len(flashConfigs)-1].maxD; last != device.TiledHeadDim {
		t.Errorf("the largest tiles take heads of %d, device.TiledHeadDim is %d", last, device.TiledHeadDim)
	}
}
