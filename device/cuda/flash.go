package cuda

import (
	"fmt"

	"github.com/memfit/memfit/device"
)

// flashTiles are the tiles of kernels.cu's tiled attention (k_flash_*) for
// heads of up to maxD elements: query rows and keys per tile of forward
// and of backward. A kernel's shared memory stays under the 48 KiB every
// GPU gives a block without asking.
//
// On CUDA cores (flashConfigs) a block is a 16×16 grid of threads, so each
// tile is a multiple of 16, and the tiles in shared memory are floats with
// one word of padding per row. On tensor cores (flashTCConfigs,
// tensorCores) a block is flashTCWarps warps, each owning 16 rows: the
// query rows of forward (fwdRows) and of dq (bwdRows), the keys of dk and
// dv (bwdCols); the tiles streamed through shared memory (fwdCols and
// bwdCols keys, bwdRows query rows of dk and dv) are 16-bit, with 8
// elements of padding per row.
type flashTiles struct {
	maxD             int
	fwdRows, fwdCols int
	bwdRows, bwdCols int
	suffix           string
	tensorCores      bool
}

var flashConfigs = []flashTiles{
	{maxD: 64, fwdRows: 64, fwdCols: 32, bwdRows: 32, bwdCols: 32, suffix: "_d64"},
	{maxD: 128, fwdRows: 32, fwdCols: 32, bwdRows: 16, bwdCols: 16, suffix: "_d128"},
}

// flashTCWarps is the warps of a tensor-core kernel's block.
const flashTCWarps = 4

var flashTCConfigs = []flashTiles{
	{maxD: 64, fwdRows: 64, fwdCols: 64, bwdRows: 64, bwdCols: 64, suffix: "_tc_d64", tensorCores: true},
	{maxD: 128, fwdRows: 64, fwdCols: 64, bwdRows: 64, bwdCols: 64, suffix: "_tc_d128", tensorCores: true},
}

// flashFor returns the tiles for heads of d elements of dtype dt, or false
// where the slot kernels (k_attention, k_attention_bwd) serve instead: f64
// heads and heads longer than the largest tiles take. With tensorCores
// (a GPU of compute capability 8.0 or later: mma.sync on bf16 and f16)
// f16 and bf16 heads take the tensor-core kernels; f32 heads stay on CUDA
// cores, computing as they always did. Both sets take the same heads, so
// whether a call is tiled does not depend on the GPU.
func flashFor(dt device.DType, d int, tensorCores bool) (flashTiles, bool) {
	if dt == device.F64 {
		return flashTiles{}, false
	}
	configs := flashConfigs
	if tensorCores && (dt == device.F16 || dt == device.BF16) {
		configs = flashTCConfigs
	}
	for _, f := range configs {
		if d <= f.maxD {
			return f, true
		}
	}
	return flashTiles{}, false
}

// threads is a block of these tiles' kernels.
func (f flashTiles) threads() int {
	if f.tensorCores {
		return 32 * flashTCWarps
	}
	return block
}

// sharedBytes is the static shared memory of each tiled kernel for these
// tiles (kernels.cu's __shared__ arrays: floats, or 16-bit elements on
// tensor cores; starts are 8 bytes).
func (f flashTiles) sharedBytes() (fwd, bwdKV, bwdQ int) {
	if f.tensorCores {
		tile := func(rows, cols int) int { return 2 * rows * (cols + 8) }
		fwd = 2 * tile(f.fwdCols, f.maxD)
		bwdKV = 2*tile(f.bwdRows, f.maxD) + f.bwdRows*(4+4+8)
		bwdQ = 2 * tile(f.bwdCols, f.maxD)
		return fwd, bwdKV, bwdQ
	}
	// A tile is rows of cols floats padded by pad words, in a 16-byte
	// aligned struct (kernels.cu's fa_tile).
	tile := func(rows, cols, pad int) int { return (4*rows*(cols+pad) + 15) &^ 15 }
	d := f.maxD
	// Forward: queries transposed (BR+4), one buffer for the keys
	// transposed (BC+1) and then the values by rows (D+4), probabilities
	// transposed (BR+4).
	fwd = tile(d, f.fwdRows, 4) + max(tile(d, f.fwdCols, 1), tile(f.fwdCols, d, 4)) + tile(f.fwdCols, f.fwdRows, 4)
	stats := f.bwdRows * (4 + 4 + 8)
	bwdKV = 2*tile(f.bwdCols, d, 1) + 2*tile(f.bwdRows, d, 4) + 2*tile(f.bwdRows, f.bwdCols, 1) + stats
	bwdQ = 2*tile(f.bwdRows, d, 1) + 2*tile(f.bwdCols, d, 1) + tile(f.bwdRows, f.bwdCols, 1) + stats
	return fwd, bwdKV, bwdQ
}

// flashGrid is the blocks of a launch over tiles of rows (query rows or
// keys) of heads (batch × head) of t rows each: one block per tile, the
// kernels looping when there are more than maxGrid.
func flashGrid(heads, t, rows int) int {
	n := int64(heads) * int64((t+rows-1)/rows)
	return int(min(n, maxGrid))
}

// flashDefines are the tiles as the prelude's macros: FA_FWD_BR64 and so
// on, FA_TC_FWD_BR64 and so on for the tensor-core kernels.
func flashDefines() string {
	s := fmt.Sprintf("#define FA_DMAX %d\n#define FA_TC_WARPS %d\n", flashConfigs[len(flashConfigs)-1].maxD, flashTCWarps)
	for _, f := range append(append([]flashTiles{}, flashConfigs...), flashTCConfigs...) {
		prefix := "FA_"
		if f.tensorCores {
			prefix = "FA_TC_"
		}
		for _, v := range []struct {
			name string
			n    int
		}{{"FWD_BR", f.fwdRows}, {"FWD_BC", f.fwdCols}, {"BWD_BR", f.bwdRows}, {"BWD_BC", f.bwdCols}} {
			s += fmt.Sprintf("#define %s%s%d %d\n", prefix, v.name, f.maxD, v.n)
		}
	}
	return s
}

// flashKernels are the tiled kernels' entry points.
func flashKernels() []string {
	var names []string
	for _, f := range append(append([]flashTiles{}, flashConfigs...), flashTCConfigs...) {
		for _, k := range []string{"k_flash_fwd", "k_flash_bwd_kv", "k_flash_bwd_q"} {
			names = append(names, k+f.suffix)
		}
	}
	return names
}
