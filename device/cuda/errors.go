package cuda

import "fmt"

// Error is the error (or panic value, from a kernel) of a failing CUDA,
// cuBLAS or NVRTC call: which device, what memfit was doing, and the
// library's own error.
type Error struct {
	Device string // "cuda:0"
	Op     string // "launch k_softmax_f32", "cublasGemmEx", "compile kernels"
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s: %v", e.Device, e.Op, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// errNoCUDA is what New says in a build without the cuda tag.
const errNoCUDA = "memfit was built without CUDA support; rebuild with -tags cuda (needs the CUDA 12 toolkit and a driver)"
