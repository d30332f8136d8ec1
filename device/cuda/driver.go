//go:build cuda || cudaemu

package cuda

import (
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda/internal/cu"
)

// cStream is the CUstream inside s.
func cStream(s cu.Stream) unsafe.Pointer { return cu.StreamHandle(s) }

// launch runs on the device's thread.
func launch(f cu.Function, grid int, s cu.Stream, a *args) error {
	return cu.Launch(f, grid, block, s, a.words, a.starts)
}

// blasHandle is a cuBLAS handle bound to one stream.
type blasHandle struct{ b *cu.Blas }

func newBlas(s cu.Stream) (*blasHandle, error) {
	b, err := cu.NewBlas(s)
	if err != nil {
		return nil, err
	}
	return &blasHandle{b}, nil
}

func (b *blasHandle) close() error {
	if b == nil {
		return nil
	}
	return b.b.Close()
}

func cudaType(d device.DType) cu.DataType {
	switch d {
	case device.F32:
		return cu.R32F
	case device.F64:
		return cu.R64F
	case device.F16:
		return cu.R16F
	case device.BF16:
		return cu.R16BF
	}
	panic("cuda: no cuBLAS type for " + d.String())
}

func computeType(k computeKind) cu.ComputeType {
	switch k {
	case compute32FTF32:
		return cu.Compute32FFastTF32
	case compute64F:
		return cu.Compute64F
	}
	return cu.Compute32F
}

// addr is the device address of a view's first element.
func addr(v device.View) cu.DevicePtr {
	return cu.DevicePtr(uint64(v.Buf.Block.Ptr()) + uint64(v.Offset*v.DType.Size()))
}

// gemm runs on the device's thread.
func (b *blasHandle) gemm(g blasGemm) error {
	return b.b.Gemm(cu.Gemm{
		TransA: g.transA, TransB: g.transB, M: g.m, N: g.n, K: g.k,
		Alpha: g.alpha, Beta: g.beta,
		A: addr(g.a), AType: cudaType(g.a.DType), Lda: g.lda, StrideA: g.strideA,
		B: addr(g.b), BType: cudaType(g.b.DType), Ldb: g.ldb, StrideB: g.strideB,
		C: addr(g.c), CType: cudaType(g.c.DType), Ldc: g.ldc, StrideC: g.strideC,
		Batch: g.batch, Compute: computeType(g.compute), Bias: biasAddr(g.bias),
	})
}

func biasAddr(v device.View) cu.DevicePtr {
	if v.Buf.Block == nil {
		return 0
	}
	return addr(v)
}

// hostAlloc returns n bytes of page-locked host memory (needs the context
// current: runs on the device's thread).
func hostAlloc(n int) (unsafe.Pointer, error) { return cu.HostAlloc(n) }

func hostFree(p unsafe.Pointer) error { return cu.HostFree(p) }
