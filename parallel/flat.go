package parallel

import (
	"fmt"
	"sort"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// DefaultBucketBytes is the default size of a communication bucket
// (PyTorch DDP's 25 MiB).
const DefaultBucketBytes = 25 << 20

// flat numbers the elements of a list of tensors as one vector, tensor
// after tensor, each in row-major order: the layout buckets and ZeRO
// shards are cut from. Nothing is copied into such a vector; segments map
// flat ranges back to pieces of the tensors.
type flat struct {
	params []*tensor.Tensor
	off    []int // flat position of params[i]'s first element
	total  int
}

func newFlat(params []*tensor.Tensor) *flat { return newFlatAligned(params, 1) }

// newFlatAligned starts every tensor at a multiple of align, leaving gaps
// (padding, read as zeros) between them: ZeRO's layout for optimizer
// state kept in blocks, so that rank boundaries, multiples of align too,
// fall on the tensors' own block boundaries.
func newFlatAligned(params []*tensor.Tensor, align int) *flat {
	f := &flat{params: params, off: make([]int, len(params))}
	for i, p := range params {
		f.total = roundUp(f.total, align)
		f.off[i] = f.total
		f.total += p.Len()
	}
	return f
}

// shardLayout lays params out for n ranks of S elements each, S a
// multiple of align: every tensor starts at a multiple of align
// (newFlatAligned's layout) and, with whole set (an optimizer that updates
// each tensor whole: optim.Optimizer.ShardAlignment 0), a tensor that
// would straddle a rank boundary starts at that boundary instead, so each
// rank owns whole tensors. S is the least that fits: next-fit packing of
// tensors in a fixed order needs no more ranks when S grows, so a binary
// search finds it. The gaps are zeros in the collectives' buckets, never
// memory that lasts; with whole tensors S is at least the largest one.
func shardLayout(params []*tensor.Tensor, n, align int, whole bool) (*flat, int) {
	f := newFlatAligned(params, align)
	S := roundUp((f.total+n-1)/n, align)
	if !whole {
		return f, S
	}
	place := func(S int) *flat {
		g := &flat{params: params, off: make([]int, len(params))}
		for i, p := range params {
			off := roundUp(g.total, align)
			if k := p.Len(); k > 0 && off/S != (off+k-1)/S {
				off = roundUp(off, S)
			}
			g.off[i] = off
			g.total = off + p.Len()
		}
		return g
	}
	lo := S
	for _, p := range params {
		lo = max(lo, roundUp(p.Len(), align))
	}
	lo = max(lo, align)
	hi := lo
	for place(hi).total > n*hi {
		hi *= 2
	}
	for lo < hi { // the least multiple of align in [lo, hi] that fits
		mid := roundUp(lo+(hi-lo)/2, align)
		if mid >= hi {
			mid = lo
		}
		if place(mid).total <= n*mid {
			hi = mid
		} else {
			lo = mid + align
		}
	}
	return place(hi), hi
}

// roundUp is the least multiple of m not below n.
func roundUp(n, m int) int { return (n + m - 1) / m * m }

// segment is elements [a, a+n) of params[i], at flat position pos.
type segment struct{ i, a, n, pos int }

// segments lists the pieces of the flat range [lo, hi) (clipped to the
// vector), skipping the gaps of an aligned layout.
func (f *flat) segments(lo, hi int) []segment {
	lo, hi = max(lo, 0), min(hi, f.total)
	if lo >= hi {
		return nil
	}
	i := sort.Search(len(f.off), func(i int) bool { return f.off[i]+f.params[i].Len() > lo })
	var out []segment
	for ; i < len(f.params); i++ {
		n := f.params[i].Len()
		if n == 0 {
			continue
		}
		pos := max(lo, f.off[i])
		if pos >= hi {
			break
		}
		k := min(f.off[i]+n, hi) - pos
		out = append(out, segment{i: i, a: pos - f.off[i], n: k, pos: pos})
	}
	return out
}

// slice is a 1-D view of elements [a, a+n) of t (contiguous).
func slice(s *tensor.Scope, t *tensor.Tensor, a, n int) *tensor.Tensor {
	r := s.Reshape(t, t.Len())
	v := s.Narrow(r, 0, a, n)
	r.Release()
	return v
}

// assign copies src into dst (same length, contiguous dst) on the device,
// converting to dst's dtype: exactly from BF16 into F32, rounding to
// nearest from F32 into BF16 (an averaged BF16 gradient).
func assign(s *tensor.Scope, dst, src *tensor.Tensor) {
	dst.Fill(0)
	addInto(s, dst, src)
}

// addInto adds src into dst (same length, contiguous dst), rounding src
// to dst's dtype first when they differ, as assign does.
func addInto(s *tensor.Scope, dst, src *tensor.Tensor) {
	if src.DType() != dst.DType() {
		c := s.Cast(src, dst.DType())
		s.AddInPlace(dst, c).Release()
		c.Release()
		return
	}
	s.AddInPlace(dst, src).Release()
}

// gather copies the flat range [lo, hi) of the tensors get returns into
// dst (1-D, hi-lo elements); a nil tensor, and the part of the range past
// the end of the vector (padding), read as zeros.
func (f *flat) gather(s *tensor.Scope, dst *tensor.Tensor, lo, hi int, get func(i int) *tensor.Tensor) {
	if hi-lo != dst.Len() {
		panic(fmt.Sprintf("dist: gather of %d elements into %d", hi-lo, dst.Len()))
	}
	zero := func(a, b int) { // dst's part for flat [a, b): padding
		if a < b {
			d := s.Narrow(dst, 0, a-lo, b-a)
			d.Fill(0)
			d.Release()
		}
	}
	at := lo
	for _, sg := range f.segments(lo, hi) {
		zero(at, sg.pos)
		at = sg.pos + sg.n
		d := s.Narrow(dst, 0, sg.pos-lo, sg.n)
		if src := get(sg.i); src != nil {
			v := slice(s, src, sg.a, sg.n)
			assign(s, d, v)
			v.Release()
		} else {
			d.Fill(0)
		}
		d.Release()
	}
	zero(at, hi)
}

// scatter copies src (1-D, hi-lo elements) into the flat range [lo, hi)
// of the tensors get returns (nil ones are skipped, and so is padding).
func (f *flat) scatter(s *tensor.Scope, src *tensor.Tensor, lo, hi int, get func(i int) *tensor.Tensor) {
	for _, sg := range f.segments(lo, hi) {
		dst := get(sg.i)
		if dst == nil {
			continue
		}
		d := slice(s, dst, sg.a, sg.n)
		v := s.Narrow(src, 0, sg.pos-lo, sg.n)
		assign(s, d, v)
		d.Release()
		v.Release()
	}
}

// checkParams checks that params are distinct live contiguous F32 or BF16
// tensors on one device and returns that device. The collectives carry
// F32: BF16 values are widened exactly into the buckets, and what comes
// back into a BF16 tensor is rounded to nearest (an average; parameters
// come back exactly).
func checkParams(where string, params []*tensor.Tensor) (device.Device, error) {
	if len(params) == 0 {
		return nil, fmt.Errorf("dist: %s: no parameters", where)
	}
	seen := map[*tensor.Tensor]bool{}
	var dev device.Device
	for i, p := range params {
		if err := checkParam(where, fmt.Sprintf("parameter %d (%s)", i, nameOf(p)), p); err != nil {
			return nil, err
		}
		if seen[p] {
			return nil, fmt.Errorf("dist: %s: parameter %s is listed twice", where, nameOf(p))
		}
		seen[p] = true
		if dev == nil {
			dev = p.Device()
		} else if p.Device() != dev {
			return nil, fmt.Errorf("dist: %s: parameter %s is on another device than %s", where, nameOf(p), nameOf(params[0]))
		}
	}
	return dev, nil
}

// checkParam is checkF32 accepting BF16 too.
func checkParam(where, what string, p *tensor.Tensor) error {
	if p == nil || p.Released() {
		return checkF32(where, what, p)
	}
	switch p.DType() {
	case tensor.F32, tensor.BF16:
		if !p.IsContiguous() {
			return fmt.Errorf("dist: %s: %s %v is not contiguous", where, what, p)
		}
		return nil
	}
	return fmt.Errorf("dist: %s: %s %v: want f32 or bf16", where, what, p)
}

func nameOf(p *tensor.Tensor) string {
	if p == nil {
		return "<nil>"
	}
	if p.Name() != "" {
		return p.Name()
	}
	return fmt.Sprintf("(unnamed %v)", p.Shape())
}

// bucketElems converts a bucket size in bytes to F32 elements (at least 1).
func bucketElems(bytes int64) int {
	if bytes <= 0 {
		bytes = DefaultBucketBytes
	}
	return int(max(bytes/4, 1))
}

// tempScope is where packing and unpacking run: no graph, temporaries.
func tempScope() *tensor.Scope {
	return tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Temporary))
}

// syncPresence agrees across ranks on which params have a gradient: it
// returns, per parameter, how many ranks hold one, and gives a zero
// gradient (memory.Gradient) to a parameter that some other rank has a
// gradient for and this one has not (it contributed nothing).
//
// The ranks exchange what they lack, not what they have, so that a
// collective that returns zeros — NewMeta's on the meta device, where a
// plan runs — reads as every rank holding every gradient, as in a real
// step of the same graph.
func syncPresence(c Comm, dev device.Device, params []*tensor.Tensor) ([]int, error) {
	missing := make([]float32, len(params))
	for i, p := range params {
		if p.Grad() == nil {
			missing[i] = 1
		}
	}
	t, err := tensor.FromFloat32(dev, missing, []int{len(missing)}, memory.Temporary)
	if err != nil {
		return nil, err
	}
	defer t.Release()
	if err := c.AllReduce(t, Sum); err != nil {
		return nil, err
	}
	counts := make([]int, len(params))
	for i, v := range t.Float32s() {
		counts[i] = c.Size() - int(v+0.5)
		if p := params[i]; counts[i] > 0 && p.Grad() == nil {
			g, err := tensor.New(dev, tensor.F32, p.Shape(), memory.Gradient)
			if err != nil {
				return nil, err
			}
			p.SetGrad(g)
		}
	}
	return counts, nil
}
