package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/memfit/memfit/device"
)

// offsetOf is the element offset of multi-index idx in v.
func offsetOf(v device.View, idx []int) int64 {
	var o int64
	for i, c := range idx {
		o += int64(c) * int64(v.Strides[i])
	}
	return o
}

// unravel is the row-major multi-index of element i of shape.
func unravel(shape []int, i int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = i % shape[d]
		i /= shape[d]
	}
	return idx
}

func randomView(rng *rand.Rand, shape []int) device.View {
	st := make([]int, len(shape))
	switch rng.IntN(3) {
	case 0: // contiguous
		s := 1
		for i := len(shape) - 1; i >= 0; i-- {
			st[i] = s
			s *= shape[i]
		}
	case 1: // transposed: strides in reverse order
		s := 1
		for i := range shape {
			st[i] = s
			s *= shape[i]
		}
	default: // broadcast some dimensions, pad others
		s := 1
		for i := len(shape) - 1; i >= 0; i-- {
			if rng.IntN(3) == 0 {
				st[i] = 0
				continue
			}
			st[i] = s
			s *= shape[i] + rng.IntN(2)
		}
	}
	return device.View{DType: device.F32, Shape: shape, Strides: st}
}

// TestEwOffsets checks that merging dimensions keeps every operand's offset
// of every element, in row-major order.
func TestEwOffsets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		shape := make([]int, 1+rng.IntN(6))
		for i := range shape {
			shape[i] = 1 + rng.IntN(4)
		}
		views := []device.View{randomView(rng, shape), randomView(rng, shape), randomView(rng, shape)}
		g := newEw(shape, views...)
		n := 1
		for _, s := range shape {
			n *= s
		}
		if g.n != int64(n) {
			t.Fatalf("shape %v: n = %d, want %d", shape, g.n, n)
		}
		for i := 0; i < n; i++ {
			got := g.offsets(int64(i), len(views))
			idx := unravel(shape, i)
			for k, v := range views {
				if want := offsetOf(v, idx); got[k] != want {
					t.Fatalf("shape %v strides %v: element %d at %d, want %d (geometry %+v)", shape, v.Strides, i, got[k], want, g)
				}
			}
		}
	}
}

func TestEwMerges(t *testing.T) {
	v := device.View{Shape: []int{2, 3, 4}, Strides: []int{12, 4, 1}}
	if g := newEw(v.Shape, v, v); g.rank != 1 || g.shape[0] != 24 {
		t.Errorf("contiguous 2x3x4: rank %d shape %v, want one dimension of 24", g.rank, g.shape)
	}
	b := device.View{Shape: []int{2, 3, 4}, Strides: []int{0, 4, 1}}
	if g := newEw(v.Shape, v, b); g.rank != 2 || g.shape[0] != 2 || g.shape[1] != 12 {
		t.Errorf("broadcast over the first dimension: rank %d shape %v, want [2 12]", g.rank, g.shape[:g.rank])
	}
	if g := newEw([]int{3, 0}, v); g.n != 0 {
		t.Errorf("empty shape: n = %d", g.n)
	}
}

func TestEwTooManyDims(t *testing.T) {
	shape := make([]int, maxDims+1)
	st := make([]int, maxDims+1)
	for i := range shape {
		shape[i] = 2
		st[i] = 1 << (2 * (len(shape) - i)) // never mergeable
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic for a view that cannot be merged below maxDims")
		}
	}()
	newEw(shape, device.View{Shape: shape, Strides: st})
}

// TestRedGeometry checks the reduction plan against a direct enumeration:
// every source element lands on the dst element of its kept coordinates.
func TestRedGeometry(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		shape := make([]int, 1+rng.IntN(5))
		for i := range shape {
			shape[i] = 1 + rng.IntN(4)
		}
		src := randomView(rng, shape)
		for i := range src.Strides {
			if src.Strides[i] == 0 {
				src.Strides[i] = 7
			}
		}
		lead := rng.IntN(len(shape))
		dshape := slices.Clone(shape[lead:])
		for i := range dshape {
			if rng.IntN(2) == 0 {
				dshape[i] = 1
			}
		}
		dst := device.View{Shape: dshape, Strides: make([]int, len(dshape))}
		s := 1
		for i := len(dshape) - 1; i >= 0; i-- {
			dst.Strides[i] = s
			s *= dshape[i]
		}
		g := newRed(dst, src)
		// Expected: map from dst offset to the sorted src offsets reduced into it.
		want := map[int64][]int64{}
		n := src.Len()
		for i := 0; i < n; i++ {
			idx := unravel(shape, i)
			var do int64
			for j := range dshape {
				if dshape[j] != 1 {
					do += int64(idx[lead+j]) * int64(dst.Strides[j])
				}
			}
			want[do] = append(want[do], offsetOf(src, idx))
		}
		got := map[int64][]int64{}
		for o := int64(0); o < g.nout; o++ {
			var so, do int64
			r := o
			for d := g.orank - 1; d >= 0; d-- {
				c := r % g.oshape[d]
				r /= g.oshape[d]
				so += c * g.osrc[d]
				do += c * g.odst[d]
			}
			for j := int64(0); j < g.nred; j++ {
				off := so
				r := j
				for d := g.rrank - 1; d >= 0; d-- {
					c := r % g.rshape[d]
					r /= g.rshape[d]
					off += c * g.rstr[d]
				}
				got[do] = append(got[do], off)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("src %v %v into %v: %d outputs, want %d", shape, src.Strides, dshape, len(got), len(want))
		}
		for k, w := range want {
			gk := got[k]
			slices.Sort(w)
			slices.Sort(gk)
			if !slices.Equal(gk, w) {
				t.Fatalf("src %v %v into %v: output %d reads %v, want %v", shape, src.Strides, dshape, k, gk, w)
			}
		}
	}
}

func TestArgsLayout(t *testing.T) {
	var a args
	a.i64(-1).op(device.View{DType: device.BF16, Offset: 7}).f64(0.5).ew(&ewGeom{n: 3, rank: 1})
	if want := []int32{0, 1, 4, 5}; !slices.Equal(a.starts, want) {
		t.Errorf("starts = %v, want %v", a.starts, want)
	}
	if len(a.words) != 5+ewWords {
		t.Errorf("%d words, want %d", len(a.words), 5+ewWords)
	}
	if a.words[1] != 0 || a.words[2] != 7 || a.words[3] != uint64(device.BF16) {
		t.Errorf("Op words = %v, want [0 7 %d]", a.words[1:4], device.BF16)
	}
	if got := len((&redGeom{}).words()); got != redWords {
		t.Errorf("Red has %d words, want %d", got, redWords)
	}
}

func TestGrid(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want int
	}{{0, 0}, {1, 1}, {block, 1}, {block + 1, 2}, {1 << 40, maxGrid}} {
		if got := gridFor(c.n); got != c.want {
			t.Errorf("gridFor(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
