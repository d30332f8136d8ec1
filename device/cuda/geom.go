package cuda

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/device"
)

// Limits of the kernels' argument structs (kernels.cu receives them through
// the generated prelude, so both sides agree).
const (
	maxDims = 8 // dimensions of a strided operand after merging
	maxOps  = 4 // operands of one elementwise kernel
	block   = 256
	// maxGrid bounds the blocks of a grid-stride launch; more elements are
	// handled by each thread looping.
	maxGrid = 1 << 16
)

// args is a kernel's argument list laid out as cuLaunchKernel wants it:
// every argument starts on an 8-byte word, and a struct argument is several
// consecutive words. All of kernels.cu's structs hold only 8-byte fields, so
// there is no padding to reproduce.
type args struct {
	words  []uint64
	starts []int32
}

func (a *args) begin() { a.starts = append(a.starts, int32(len(a.words))) }

// i64 appends a long long argument.
func (a *args) i64(v int64) *args {
	a.begin()
	a.words = append(a.words, uint64(v))
	return a
}

// f64 appends a double argument.
func (a *args) f64(v float64) *args {
	a.begin()
	a.words = append(a.words, math.Float64bits(v))
	return a
}

// u64 appends an unsigned long long argument.
func (a *args) u64(v uint64) *args {
	a.begin()
	a.words = append(a.words, v)
	return a
}

// op appends an Op struct {char* p; long long off; long long dt;}: the
// buffer's device address, the view's element offset and its dtype code.
func (a *args) op(v device.View) *args {
	a.begin()
	var p uint64
	if v.Buf.Block != nil {
		p = uint64(v.Buf.Block.Ptr())
	}
	a.words = append(a.words, p, uint64(int64(v.Offset)), uint64(v.DType))
	return a
}

// heads appends a [B, H, T, D] view with unit last stride as two
// arguments: its Op and a Heads struct {sb, sh, st} of its other strides.
func (a *args) heads(v device.View) *args {
	if len(v.Strides) != 4 || v.Strides[3] != 1 {
		panic(fmt.Sprintf("cuda: attention operand of shape %v and strides %v: want [B, H, T, D] with unit last stride", v.Shape, v.Strides))
	}
	a.op(v)
	a.begin()
	a.words = append(a.words, uint64(int64(v.Strides[0])), uint64(int64(v.Strides[1])), uint64(int64(v.Strides[2])))
	return a
}

// ew appends an Ew struct.
func (a *args) ew(g *ewGeom) *args {
	a.begin()
	a.words = append(a.words, g.words()...)
	return a
}

// red appends a Red struct.
func (a *args) red(g *redGeom) *args {
	a.begin()
	a.words = append(a.words, g.words()...)
	return a
}

// ewGeom mirrors struct Ew of kernels.cu: n elements over a row-major shape
// of rank dimensions, with per-operand strides. The element offsets travel
// in each operand's Op.
type ewGeom struct {
	n     int64
	rank  int64
	shape [maxDims]int64
	str   [maxOps][maxDims]int64
}

// ewWords is the number of 8-byte words of struct Ew.
const ewWords = 2 + maxDims + maxOps*maxDims

func (g *ewGeom) words() []uint64 {
	w := make([]uint64, 0, ewWords)
	w = append(w, uint64(g.n), uint64(g.rank))
	for _, s := range g.shape {
		w = append(w, uint64(s))
	}
	for k := range g.str {
		for _, s := range g.str[k] {
			w = append(w, uint64(s))
		}
	}
	return w
}

// newEw builds the iteration geometry of shape over views: size-1
// dimensions are dropped and a dimension is merged into the next whenever
// every operand is contiguous across the two, as the CPU device's loops do.
// Merging keeps the row-major order of elements, so element i of the
// kernel's loop is element i of shape: counter-based kernels (Dropout,
// Random, CausalFill) use it as the position.
func newEw(shape []int, views ...device.View) *ewGeom {
	if len(views) > maxOps {
		panic(fmt.Sprintf("cuda: %d operands, kernels take at most %d", len(views), maxOps))
	}
	g := &ewGeom{n: 1}
	for _, s := range shape {
		g.n *= int64(s)
	}
	if g.n == 0 {
		return g
	}
	var sizes []int64
	strs := make([][]int64, len(views))
	for i, s := range shape {
		if s == 1 {
			continue
		}
		merge := len(sizes) > 0
		for k, v := range views {
			if merge && strs[k][len(strs[k])-1] != int64(v.Strides[i])*int64(s) {
				merge = false
			}
		}
		if merge {
			sizes[len(sizes)-1] *= int64(s)
			for k, v := range views {
				strs[k][len(strs[k])-1] = int64(v.Strides[i])
			}
			continue
		}
		sizes = append(sizes, int64(s))
		for k, v := range views {
			strs[k] = append(strs[k], int64(v.Strides[i]))
		}
	}
	if len(sizes) > maxDims {
		panic(fmt.Sprintf("cuda: shape %v has %d dimensions after merging, kernels take at most %d", shape, len(sizes), maxDims))
	}
	g.rank = int64(len(sizes))
	copy(g.shape[:], sizes)
	for k := range views {
		copy(g.str[k][:], strs[k])
	}
	return g
}

// offsets is what the kernel computes for element i: each operand's
// element offset relative to its view's Offset. Tests use it to check the
// geometry against the views' own strides.
func (g *ewGeom) offsets(i int64, nops int) []int64 {
	o := make([]int64, nops)
	for d := g.rank - 1; d >= 0; d-- {
		c := i % g.shape[d]
		i /= g.shape[d]
		for k := range o {
			o[k] += c * g.str[k][d]
		}
	}
	return o
}

// redGeom mirrors struct Red of kernels.cu: nout output elements over the
// kept dimensions (strides in src and in dst) and, for each, nred source
// elements over the reduced dimensions.
type redGeom struct {
	nout, nred   int64
	orank, rrank int64
	oshape       [maxDims]int64
	osrc, odst   [maxDims]int64
	rshape, rstr [maxDims]int64
}

const redWords = 4 + 5*maxDims

func (g *redGeom) words() []uint64 {
	w := make([]uint64, 0, redWords)
	w = append(w, uint64(g.nout), uint64(g.nred), uint64(g.orank), uint64(g.rrank))
	for _, arr := range []*[maxDims]int64{&g.oshape, &g.osrc, &g.odst, &g.rshape, &g.rstr} {
		for _, v := range arr {
			w = append(w, uint64(v))
		}
	}
	return w
}

// newRed splits src's dimensions into those dst keeps (same size) and
// those it reduces (size 1 in dst, or missing from dst's leading
// dimensions), with the CPU device's convention.
func newRed(dst, src device.View) *redGeom {
	g := &redGeom{nout: 1, nred: 1}
	lead := len(src.Shape) - len(dst.Shape)
	type dim struct{ size, a, b int64 }
	var kept, red []dim
	push := func(list []dim, d dim, two bool) []dim {
		if n := len(list); n > 0 {
			last := &list[n-1]
			if last.a == d.a*d.size && (!two || last.b == d.b*d.size) {
				last.size *= d.size
				last.a, last.b = d.a, d.b
				return list
			}
		}
		return append(list, d)
	}
	for i, s := range src.Shape {
		if s == 1 {
			continue
		}
		if j := i - lead; j >= 0 && dst.Shape[j] == s {
			kept = push(kept, dim{int64(s), int64(src.Strides[i]), int64(dst.Strides[j])}, true)
			g.nout *= int64(s)
		} else {
			red = push(red, dim{int64(s), int64(src.Strides[i]), 0}, false)
			g.nred *= int64(s)
		}
	}
	if len(kept) > maxDims || len(red) > maxDims {
		panic(fmt.Sprintf("cuda: reduce of shape %v into %v needs more than %d dimensions", src.Shape, dst.Shape, maxDims))
	}
	g.orank, g.rrank = int64(len(kept)), int64(len(red))
	for i, d := range kept {
		g.oshape[i], g.osrc[i], g.odst[i] = d.size, d.a, d.b
	}
	for i, d := range red {
		g.rshape[i], g.rstr[i] = d.size, d.a
	}
	return g
}

// gridFor is the number of blocks of a grid-stride launch over n items.
func gridFor(n int64) int {
	if n <= 0 {
		return 0
	}
	return int(min((n+block-1)/block, maxGrid))
}

// rowsGrid is the number of blocks of a launch with one block per row; the
// kernels loop when there are more rows than blocks.
func rowsGrid(rows int) int { return min(rows, maxGrid) }

// smallReduction is the source count per output under which Reduce runs one
// thread per output element instead of one block.
const smallReduction = 64

// reduceCols is the outputs one block of k_reduce_cols (and of
// k_layernorm_bwd_param) takes: 8 floats are a 32-byte sector, what a GPU
// moves at once, and few outputs per block make many blocks.
const reduceCols = 8

// colsGrid is the number of blocks of a launch of reduceCols outputs per
// block.
func colsGrid(n int64) int { return int(min((n+reduceCols-1)/reduceCols, maxGrid)) }

// The split of a column reduction over its reduced elements (rows): when
// reduceCols outputs per block give fewer than half of colsTarget blocks,
// the rows are cut into slices of at least colsSliceRows, each block
// reduces its columns over one slice and writes partial results to the
// device's partials buffer, and a second kernel combines them in slice
// order (kernels.cu, before k_reduce_cols). A bias of 384 over 4096 rows
// is 48 column blocks: 12% of an H100's threads, 5% of its bandwidth.
const (
	// colsTarget is the blocks a split aims for: four per SM of an H100
	// or H200 (132 SMs), 1024 threads each, enough loads in flight to
	// cover the memory's latency. A constant rather than the GPU's SM
	// count, so that the result of a reduction (its order of sums) is the
	// same on every GPU.
	colsTarget = 4 * 132
	// colsSliceRows is the least rows of a slice: four per group of
	// reduceCols threads, one turn of k_reduce_cols's loop of four rows
	// in flight. A slice's rows are a multiple of the groups, so that each
	// group takes as many.
	colsSliceRows = 4 * colsGroups
	colsGroups    = block / reduceCols
	// partialsBytes is the size of the device's partials buffer, which
	// every split fits: cb column blocks (cb ≤ colsTarget/2) take at most
	// ⌈colsTarget/cb⌉ slices, so fewer than 3/2·colsTarget·reduceCols
	// partials per sum, two sums for layer norm, 8 bytes each for f64:
	// 99 KiB.
	partialsBytes = 128 << 10
)

// colsPlan is the launch of a column reduction of nout outputs over nred
// reduced elements (rows): grid blocks over slices of chunk rows (one
// slice, chunk = nred, when it is not split).
type colsPlan struct {
	grid          int
	chunk, slices int64
}

// colsSplit plans a column reduction whose partials take per bytes for
// each output and slice (the compute type's size, twice for layer norm's
// two sums): split into slices when the column blocks are too few, as
// many as bring the grid to colsTarget, each of at least colsSliceRows
// rows, and no more than the partials buffer holds.
func colsSplit(nout, nred, per int64) colsPlan {
	one := colsPlan{grid: colsGrid(nout), chunk: max(nred, 1), slices: 1}
	cb := (nout + reduceCols - 1) / reduceCols
	if cb == 0 || 2*cb > colsTarget {
		return one
	}
	slices := min((colsTarget+cb-1)/cb, nred/colsSliceRows, partialsBytes/(nout*per))
	if slices < 2 {
		return one
	}
	chunk := ((nred+slices-1)/slices + colsGroups - 1) / colsGroups * colsGroups
	slices = (nred + chunk - 1) / chunk
	if slices < 2 {
		return one
	}
	return colsPlan{grid: int(cb * slices), chunk: chunk, slices: slices}
}

// reducePlan picks Reduce's kernel for g, whose partial results take acc
// bytes each (the compute type's size): one thread per output for short
// reductions; threads on consecutive outputs when the kept dimensions are
// innermost and contiguous in src (a column sum, coalesced that way, split
// over the rows as colsSplit says); else one block per output. The plan's
// chunk and slices are those of k_reduce_cols.
func reducePlan(g *redGeom, acc int64) (kernel string, p colsPlan) {
	switch {
	case g.nred < smallReduction:
		return "k_reduce_thread", colsPlan{grid: gridFor(g.nout)}
	case g.orank > 0 && g.osrc[g.orank-1] == 1 && g.nout >= reduceCols:
		return "k_reduce_cols", colsSplit(g.nout, g.nred, acc)
	}
	return "k_reduce_block", colsPlan{grid: rowsGrid(int(min(g.nout, maxGrid)))}
}

// conv appends a Conv struct (device.ConvGeom, field by field).
func (a *args) conv(g device.ConvGeom) *args {
	a.begin()
	dh, dw := g.Dilation()
	for _, v := range []int{g.N, g.C, g.H, g.W, g.KH, g.KW, g.StrideH, g.StrideW, g.PadH, g.PadW, g.OH, g.OW, dh, dw} {
		a.words = append(a.words, uint64(int64(v)))
	}
	return a
}

// flag is 1 for true, as the kernels' i64 flags want.
func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// k_adam_multi's table (struct AdamMulti of kernels.cu): at most adamMulti
// tensors a launch, each cut into blocks of adamChunk elements. The table
// and the nine scalars take (1+6·adamMulti+9)·8 = 3920 bytes of the 4 KiB
// a launch's parameters may take. A tensor of more than
// adamMaxBlocks·adamChunk elements gets a k_adam launch of its own (its
// launch cost is nothing beside its work), and a table is launched before
// its blocks pass adamMaxBlocks.
const (
	adamMulti = 80
	adamChunk = 8 * block
)

// adamMaxBlocks is the most blocks of a k_adam_multi launch (a variable so
// that tests can reach its limits with small tensors).
var adamMaxBlocks int64 = 1 << 20

// adamTable is a k_adam_multi launch being filled.
type adamTable struct {
	count, blocks int64
	start, n      [adamMulti]int64
	p, g, m, v    [adamMulti]uint64
}
