package tensor

import (
	"slices"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
)

// TestAllocLike checks that a tensor allocated like a strided view takes
// the view's stride order, densely packed.
func TestAllocLike(t *testing.T) {
	dev := cpu.New()
	base := mustAlloc(dev, F32, []int{2, 5, 3, 4, 6}, memory.Other) // [B, T, 3, H, D]
	defer base.Release()
	s := NewScope()
	defer s.Close()
	head := s.Permute(s.Reshape(s.Narrow(base, 2, 1, 1), 2, 5, 4, 6), 0, 2, 1, 3) // [B, H, T, D]
	for _, tc := range []struct {
		name        string
		like        *Tensor
		wantStrides []int
	}{
		{"contiguous", base, []int{360, 72, 24, 6, 1}},
		{"head of fused qkv", head, []int{120, 6, 24, 1}},
	} {
		got := mustAllocLike(dev, BF16, tc.like, memory.Other)
		if !slices.Equal(got.shape, tc.like.shape) || !slices.Equal(got.strides, tc.wantStrides) || got.dtype != BF16 {
			t.Errorf("%s: shape %v strides %v dtype %v, want %v %v bf16", tc.name, got.shape, got.strides, got.dtype, tc.like.shape, tc.wantStrides)
		}
		if n := got.st.buf.Block.Requested(); n != int64(2*got.Len()) {
			t.Errorf("%s: %d bytes, want %d", tc.name, n, 2*got.Len())
		}
		got.Release()
	}
}
