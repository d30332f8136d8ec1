package tile

import (
	"fmt"
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/internal/plantrace"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

const (
	// Align is the multiple of rows every tile starts at: the CPU's GEMM
	// sums a product's K dimension (a weight gradient's rows) in blocks
	// of 256 rows (512 for AVX512-BF16's pairs) from the first, so tiles
	// that start on those boundaries continue the same blocks.
	Align = 512
	// MinRows is the fewest rows of a Runner's tiles: the CPU's GEMM sums
	// a K of up to oneBlock rows as one block, so a tile that short would
	// group its weight gradient's rows differently from a whole pass.
	MinRows = 2048
	// oneBlock is the longest K the CPU's GEMM sums as one block; a last
	// tile that short joins the tile before it.
	oneBlock = 1536
)

// Runner runs token-wise pieces over tiles of Rows rows (nn.TokenRunner).
type Runner struct {
	rows int
}

var _ nn.TokenRunner = (*Runner)(nil)

// New returns a runner of tiles of rows rows (tokens): a multiple of
// Align, at least MinRows.
func New(rows int) (*Runner, error) {
	if rows < MinRows || rows%Align != 0 {
		return nil, fmt.Errorf("tile: tiles of %d rows: want a multiple of %d of at least %d (tiles start on the GEMM's K blocks and span more than one, so that the weights' gradients sum their rows as one pass does)", rows, Align, MinRows)
	}
	return &Runner{rows: rows}, nil
}

// Rows is the rows of a tile.
func (t *Runner) Rows() int { return t.rows }

// Tiles cuts n rows into tiles: Rows each from the first, the last one
// taking a remainder of up to 1536 rows too. Up to Rows + 1536 rows are
// one tile: the piece then runs as it would untiled.
func (t *Runner) Tiles(n int) []nn.Rows {
	var out []nn.Rows
	for s := 0; s < n; {
		l := t.rows
		if n-s-l <= oneBlock {
			l = n - s
		}
		out = append(out, nn.Rows{Start: s, Len: l})
		s += l
	}
	return out
}

// RunTokens runs p over the tiles of its rows (nn.TokenRunner). Forward
// keeps the piece's inputs (for backward) and its output; backward
// recomputes each tile with its gradients recorded, differentiates it
// with its rows of the output's gradient, and writes the tile's rows of
// the inputs' gradients, the parameters' gradients summed over the tiles
// as one pass sums them over its rows (tensor.RowSums). One tile runs
// the piece as it is, recorded like any other ops.
func (t *Runner) RunTokens(r *nn.Run, p nn.Tokens) *tensor.Tensor {
	rows, width := check(p)
	tiles := t.Tiles(rows)
	if len(tiles) == 1 {
		return whole(r, p, rows)
	}
	out := forward(r, p, tiles, rows, width)
	if !r.Grad() {
		res := r.Detach(out) // owned by r's scope, as an op's result is
		out.Release()
		return res
	}
	p.In = slices.Clone(p.In)
	need := make([]bool, len(p.In))
	for i, x := range p.In {
		need[i] = x.RequiresGrad()
	}
	var params []*tensor.Tensor
	for _, w := range p.Params {
		if w.RequiresGrad() {
			params = append(params, w)
		}
	}
	pass, autocast := *r, r.AutocastDType() // the pass as it is now: recomputed tiles repeat it
	inputs := append(slices.Clone(p.In), params...)
	return r.Function("tile", out, inputs, p.In, func(_ *tensor.Scope, g *tensor.Tensor, saved []*tensor.Tensor) []*tensor.Tensor {
		return backward(&pass, autocast, p, tiles, need, params, g, saved)
	})
}

// check returns the rows and the total output width of p, or panics with
// a *tensor.Error naming what does not fit.
func check(p nn.Tokens) (rows, width int) {
	fail := func(format string, args ...any) {
		panic(&tensor.Error{Op: "tile", Msg: fmt.Sprintf(format, args...)})
	}
	if p.Fn == nil || len(p.In) == 0 || len(p.Out) == 0 {
		fail("a piece needs a function, inputs and output widths")
	}
	lead := func(x *tensor.Tensor) []int {
		if x.Dim() < 2 {
			fail("input %v must be [rows, width]", x)
		}
		return x.Shape()[:x.Dim()-1]
	}
	first := lead(p.In[0])
	for _, x := range p.In[1:] {
		if !slices.Equal(lead(x), first) {
			fail("inputs %v and %v differ in their rows", p.In[0], x)
		}
	}
	rows = 1
	for _, d := range first {
		rows *= d
	}
	for _, w := range p.Out {
		if w < 1 {
			fail("output widths %v must be positive", p.Out)
		}
		width += w
	}
	return rows, width
}

// whole runs p over all its rows in r, recorded: its inputs flattened to
// [rows, width] (views), its outputs joined.
func whole(r *nn.Run, p nn.Tokens, rows int) *tensor.Tensor {
	in := make([]*tensor.Tensor, len(p.In))
	for i, x := range p.In {
		in[i] = r.Reshape(x, rows, x.Shape()[x.Dim()-1])
	}
	outs := p.Fn(r, nn.Rows{Start: 0, Len: rows}, in)
	for _, x := range in {
		x.Release()
	}
	checkOuts(outs, p.Out, rows)
	return join(r.Scope, outs)
}

// join returns outs side by side, releasing them (one output: itself).
func join(s *tensor.Scope, outs []*tensor.Tensor) *tensor.Tensor {
	if len(outs) == 1 {
		return outs[0]
	}
	j := s.Concat(1, outs...)
	for _, o := range outs {
		o.Release()
	}
	return j
}

// checkOuts panics unless outs are [rows, widths[i]] of one dtype.
func checkOuts(outs []*tensor.Tensor, widths []int, rows int) {
	bad := len(outs) != len(widths)
	for i := 0; !bad && i < len(outs); i++ {
		o := outs[i]
		bad = o.Dim() != 2 || o.Shape()[0] != rows || o.Shape()[1] != widths[i] || o.DType() != outs[0].DType()
	}
	if bad {
		for _, o := range outs {
			o.Release()
		}
		panic(&tensor.Error{Op: "tile", Msg: fmt.Sprintf("a piece returned %v for %d rows of widths %v in one dtype", outs, rows, widths)})
	}
}

// rowsOf returns the tile's rows of x [..., width] as a [tile, width]
// view in s (recording nothing: x is saved data or a gradient).
func rowsOf(s *tensor.Scope, x *tensor.Tensor, tl nn.Rows) *tensor.Tensor {
	flat := s.Reshape(x, -1, x.Shape()[x.Dim()-1])
	v := s.Narrow(flat, 0, tl.Start, tl.Len)
	flat.Release()
	return v
}

// traced returns the tiles a pass on dev runs: all of them on a device
// that stores values; on one that stores none (the meta device, a plan)
// the first two and the last. A plan needs allocations, not values, and
// tiles of one length allocate alike: the first makes what persists
// over the tiles (the output, the parameters' sums), the second is every
// later tile of its length in the steady state that follows, and the
// last may be longer. Skipping the rest gives the same peaks (train's
// TestPlanSkipsRepeatsExactly; package plantrace traces them all) in a
// time that does not grow with the context.
func traced(dev device.Device, tiles []nn.Rows) []nn.Rows {
	if len(tiles) <= 3 || device.StoresValues(dev) || plantrace.Every() {
		return tiles
	}
	return []nn.Rows{tiles[0], tiles[1], tiles[len(tiles)-1]}
}

// forward computes p tile by tile without recording and returns its
// outputs side by side, [rows, width] (a new tensor the caller owns).
func forward(r *nn.Run, p nn.Tokens, tiles []nn.Rows, rows, width int) *tensor.Tensor {
	tiles = traced(p.In[0].Device(), tiles)
	var out *tensor.Tensor
	done := false
	defer func() {
		if !done && out != nil {
			out.Release() // a tile panicked (out of memory, say)
		}
	}()
	for _, tl := range tiles {
		s := r.With(tensor.NoGrad())
		func() {
			defer s.Close()
			in := make([]*tensor.Tensor, len(p.In))
			for i, x := range p.In {
				in[i] = rowsOf(s, x, tl)
			}
			outs := p.Fn(r.In(s), tl, in)
			checkOuts(outs, p.Out, tl.Len)
			if out == nil {
				var err error
				if out, err = tensor.New(outs[0].Device(), outs[0].DType(), []int{rows, width}, memory.Activation); err != nil {
					panic(err)
				}
			}
			at := 0
			for _, o := range outs {
				dst := out.View()
				dst.Offset += tl.Start*width + at
				dst.Shape = o.Shape()
				dst.Strides = []int{width, 1}
				o.Device().Copy(dst, o.View())
				at += o.Shape()[1]
				o.Release()
			}
		}()
	}
	done = true
	return out
}

// backward is the piece's gradient: each tile recomputed, recording, in a
// scope that continues the parameters' sums over rows, and differentiated
// with its rows of g. An input that is a leaf already holding a gradient
// (a block's input, which the pieces after this one have given its
// gradient's first terms) takes the tile's terms in place, as one pass
// would add them; another input's gradient is a new tensor the tiles
// fill.
func backward(pass *nn.Run, autocast tensor.DType, p nn.Tokens, tiles []nn.Rows, need []bool, params []*tensor.Tensor, g *tensor.Tensor, saved []*tensor.Tensor) []*tensor.Tensor {
	sums := tensor.NewRowSums(params)
	defer sums.Release()
	bs := tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Temporary))
	defer bs.Close()
	in := p.In
	acc := make([]*tensor.Tensor, len(in)) // input i's gradient, owned by bs
	own := make([]bool, len(in))           // acc[i] is in[i]'s own gradient
	for i, x := range in {
		if !need[i] {
			continue
		}
		if gx := x.Grad(); gx != nil && gx.DType() == x.DType() && slices.Equal(gx.Shape(), x.Shape()) {
			acc[i], own[i] = bs.Detach(gx), true
			continue
		}
		z, err := tensor.New(x.Device(), x.DType(), x.Shape(), memory.Temporary)
		if err != nil {
			panic(err)
		}
		acc[i] = bs.Detach(z)
		z.Release()
	}
	for _, tl := range traced(g.Device(), tiles) {
		backwardTile(pass, autocast, p, tl, need, own, acc, sums, g, saved)
	}
	grads := make([]*tensor.Tensor, len(in)+len(params))
	for i := range in {
		if acc[i] != nil {
			grads[i] = bs.Keep(acc[i])
		}
	}
	for j, w := range params {
		grads[len(in)+j] = sums.Gradient(w)
	}
	return grads
}

// backwardTile recomputes one tile and differentiates it.
func backwardTile(pass *nn.Run, autocast tensor.DType, p nn.Tokens, tl nn.Rows, need, own []bool, acc []*tensor.Tensor, sums *tensor.RowSums, g *tensor.Tensor, saved []*tensor.Tensor) {
	opts := []tensor.ScopeOption{tensor.SumRows(sums)}
	if autocast != device.Invalid {
		opts = append(opts, tensor.Autocast(autocast))
	}
	s := tensor.NewScope(opts...)
	defer s.Close()
	in := make([]*tensor.Tensor, len(saved))
	for i, x := range saved {
		in[i] = rowsOf(s, x, tl)
		if !need[i] {
			continue
		}
		in[i].SetRequiresGrad(true).SetGradCategory(memory.Temporary)
		if own[i] {
			in[i].SetGrad(s.Keep(rowsOf(s, acc[i], tl)))
		}
	}
	outs := p.Fn(pass.In(s), tl, in)
	checkOuts(outs, p.Out, tl.Len)
	root := join(s, outs)
	root.Backward(tensor.WithGrad(rowsOf(s, g, tl)))
	for i, x := range in {
		if !need[i] {
			continue
		}
		if own[i] {
			x.SetGrad(nil) // the view of acc[i] the tile's terms went into
			continue
		}
		if gx := x.Grad(); gx != nil {
			dst := rowsOf(s, acc[i], tl)
			dst.Device().Copy(dst.View(), gx.View())
			dst.Release()
		}
	}
}

// RunBlock runs fn, a block's forward, on x (nn.TokenRunner). In a
// recording run it gives fn a leaf of its own on x's elements and records
// what fn records as a graph of its own, which backward differentiates
// whole (nothing is recomputed and nothing more is kept; the parameters'
// gradients reach them from the inner graph, as a checkpointed segment's
// do): the block's pieces then find the gradient terms of x that the
// pieces after them have given, and add theirs onto it in the order a
// pass of whole tensors adds them. The node keeps the inner graph's root
// (tensor.Root), not the block's output, whose memory goes with its last
// reader; backward hands the output's gradient over to the inner graph
// (tensor.WithGradTaken), so it goes once the last piece has taken its
// rows. The graph is differentiated once: RetainGraph cannot run it
// again.
func (t *Runner) RunBlock(r *nn.Run, x *tensor.Tensor, fn func(r *nn.Run, x *tensor.Tensor) *tensor.Tensor) *tensor.Tensor {
	if !r.Grad() || !x.RequiresGrad() {
		return fn(r, x)
	}
	inner := r.With() // the run's modes (autocast, saved-tensor hooks); owns what fn leaves
	defer inner.Close()
	xl := inner.Detach(x)
	xl.SetRequiresGrad(true).SetGradCategory(memory.Temporary)
	y := fn(r.In(inner), xl)
	inner.Keep(xl)
	k := &nested{root: y.Root(), leaf: xl}
	res := r.Detach(y)
	if y != xl { // a block that returns its input's handle keeps it as the leaf
		y.Release()
	}
	// The node saves the leaf (which the hooks keep anyway, for its
	// gradient) so that its hooks hold the inner graph for as long as
	// the node lives.
	return r.WithModes(tensor.SaveHooks(k)).Function("tile_block", res, []*tensor.Tensor{x}, []*tensor.Tensor{xl}, func(_ *tensor.Scope, g *tensor.Tensor, _ []*tensor.Tensor) []*tensor.Tensor {
		root := k.take()
		if root == nil {
			panic(&tensor.Error{Op: "tile_block", Msg: "a block run through a token runner is differentiated once (its graph is not kept for RetainGraph)"})
		}
		defer root.Release()
		root.Backward(tensor.WithGradTaken(g))
		return []*tensor.Tensor{xl.TakeGrad()}
	})
}

// nested keeps the inner graph of RunBlock alive for the node that
// differentiates it, as the node's saved-tensor hooks: the node keeps it
// in place of its one saved tensor (the leaf), its backward takes the
// inner graph's root, and Release frees the root (when the node is
// dropped unused) and the leaf, so neither outlives the node.
type nested struct {
	root *tensor.Root
	leaf *tensor.Tensor
}

func (k *nested) Pack(*tensor.Tensor) tensor.Packed { return k }

// Unpack hands backward a handle on the leaf, the tensor the node saved.
func (k *nested) Unpack() *tensor.Tensor { return k.leaf.Alias(k.leaf) }

// take hands the root to the backward that runs it (which releases it),
// once.
func (k *nested) take() *tensor.Root {
	root := k.root
	k.root = nil
	return root
}

func (k *nested) Release() {
	if k.root != nil {
		k.root.Release()
	}
	k.leaf.Release()
}
