package cuda

import (
	"fmt"

	"github.com/memfit/memfit/device"
)

// flashTiles are the tiles of kernels.cu's tiled attention (k_flash_*) for
// heads of up to maxD elements: query rows and keys per tile of forward
// and of backward. Each tile is a multiple of 16 (a block is a 16×16 grid
// of threads), and a kernel's shared memory, float tiles of them with one
// word of padding per row, stays under the 48 KiB every GPU gives a block
// without asking.
type flashTiles struct {
	maxD             int
	fwdRows, fwdCols int
	bwdRows, bwdCols int
	suffix           string
}

var flashConfigs = []flashTiles{
	{maxD: 64, fwdRows: 64, fwdCols: 32, bwdRows: 32, bwdCols: 32, suffix: "_d64"},
	{maxD: 128, fwdRows: 32, fwdCols: 32, bwdRows: 16, bwdCols: 16, suffix: "_d128"},
}

// flashFor returns the tiles for heads of d elements of dtype dt, or false
// where the slot kernels (k_attention, k_attention_bwd) serve instead: f64
// heads and heads longer than the largest tiles take.
func flashFor(dt device.DType, d int) (flashTiles, bool) {
	if dt == device.F64 {
		return flashTiles{}, false
	}
	for _, f := range flashConfigs {
		if d <= f.maxD {
			return f, true
		}
	}
	return flashTiles{}, false
}

// sharedBytes is the static shared memory of each tiled kernel for these
// tiles (kernels.cu's __shared__ arrays, floats; starts are 8 bytes).
func (f flashTiles) sharedBytes() (fwd, bwdKV, bwdQ int) {
	tile := func(rows, cols int) int { return 4 * rows * (cols + 1) }
	fwd = tile(f.fwdRows, f.maxD) + tile(f.fwdCols, f.maxD) + tile(f.fwdRows, f.fwdCols)
	stats := f.bwdRows * (4 + 4 + 8)
	bwdKV = 2*tile(f.bwdCols, f.maxD) + 2*tile(f.bwdRows, f.maxD) + 2*tile(f.bwdRows, f.bwdCols) + stats
	bwdQ = 2*tile(f.bwdRows, f.maxD) + 2*tile(f.bwdCols, f.maxD) + tile(f.bwdRows, f.bwdCols) + stats
	return fwd, bwdKV, bwdQ
}

// flashGrid is the blocks of a launch over tiles of rows (query rows or
// keys) of heads (batch × head) of t rows each: one block per tile, the
// kernels looping when there are more than maxGrid.
func flashGrid(heads, t, rows int) int {
	n := int64(heads) * int64((t+rows-1)/rows)
	return int(min(n, maxGrid))
}

// flashDefines are the tiles as the prelude's macros.
func flashDefines() string {
	s := fmt.Sprintf("#define FA_DMAX %d\n", flashConfigs[len(flashConfigs)-1].maxD)
	for _, f := range flashConfigs {
		for _, v := range []struct {
			name string
			n    int
		}{{"FA_FWD_BR", f.fwdRows}, {"FA_FWD_BC", f.fwdCols}, {"FA_BWD_BR", f.bwdRows}, {"FA_BWD_BC", f.bwdCols}} {
			s += fmt.Sprintf("#define %s%d %d\n", v.name, f.maxD, v.n)
		}
	}
	return s
}
