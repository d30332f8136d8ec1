package parallel

import (
	"unsafe"

	"github.com/memfit/memfit/tensor"
)

// direct returns t's elements as host memory a collective can read and
// write in place (a contiguous F32 tensor of the CPU device), or nil.
// Both MPI and the in-process engine use it, so that neither allocates
// staging tensors on the device for CPU tensors: a collective then
// allocates nothing the allocator counts, whatever goroutine runs it
// (Async's), and a plan on the meta device, whose collectives allocate
// nothing either, predicts the same bytes.
func direct(t *tensor.Tensor) []float32 {
	v := t.View()
	if v.DType != tensor.F32 || len(v.Buf.Host) == 0 || !v.Contiguous() || t.Len() == 0 {
		return nil
	}
	all := unsafe.Slice((*float32)(unsafe.Pointer(&v.Buf.Host[0])), len(v.Buf.Host)/4)
	return all[v.Offset : v.Offset+t.Len()]
}

// float64s returns t's elements in float64: read in place where direct
// can, else through the tensor's own conversion (a device copy).
func float64s(t *tensor.Tensor) []float64 {
	src := direct(t)
	if src == nil {
		return t.Float64s()
	}
	out := make([]float64, len(src))
	for i, x := range src {
		out[i] = float64(x)
	}
	return out
}

// setF64 writes host values into an F32 tensor: in place where direct
// can, else through a device copy.
func setF64(t *tensor.Tensor, v []float64) error {
	if dst := direct(t); dst != nil && len(dst) == len(v) {
		for i, x := range v {
			dst[i] = float32(x)
		}
		return nil
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return tensor.Catch(func() error { return t.SetFloat32s(f) })
}
