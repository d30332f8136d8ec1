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

// blasStatus is a cublasStatus_t other than success.
type blasStatus int

var blasStatusNames = map[blasStatus]string{
	1:  "CUBLAS_STATUS_NOT_INITIALIZED",
	3:  "CUBLAS_STATUS_ALLOC_FAILED",
	7:  "CUBLAS_STATUS_INVALID_VALUE",
	8:  "CUBLAS_STATUS_ARCH_MISMATCH",
	11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func (s blasStatus) Error() string {
	if n, ok := blasStatusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("cublasStatus_t %d", int(s))
}

// blasErr is nil for CUBLAS_STATUS_SUCCESS.
func blasErr(status int) error {
	if status == 0 {
		return nil
	}
	return blasStatus(status)
}

// errNoCUDA is what New says in a build without the cuda tag.
const errNoCUDA = "memfit was built without CUDA support; rebuild with -tags cuda (needs the CUDA 12 toolkit and a driver)"
