//go:build cuda || cudaemu

package cu

// DataType is a cudaDataType: the element type of a GEMM operand.
type DataType int

// ComputeType is a cublasComputeType_t: the accumulation of a GEMM.
type ComputeType int

// Gemm is one cublasGemmEx call (Batch == 1) or one
// cublasGemmStridedBatchedEx call, in cuBLAS's column-major terms: C =
// Alpha·op(A)·op(B) + Beta·C, each operand at a device address with its
// type, leading dimension and batch stride. With Bias (M elements of
// CType, added to every column of every C before the one rounding to
// CType; Beta 0) it is one cublasLtMatmul with the bias epilogue instead;
// where cuBLASLt refuses it, Gemm returns ErrNoEpilogue having queued
// nothing.
type Gemm struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float64
	A, B, C        DevicePtr
	AType, BType   DataType
	CType          DataType
	Lda, Ldb, Ldc  int
	StrideA        int64
	StrideB        int64
	StrideC        int64
	Batch          int
	Compute        ComputeType
	Bias           DevicePtr // 0: none
}

// ErrNoEpilogue is Gemm's error when cuBLASLt refuses a product with a
// bias (no algorithm for its types, shapes or pointers' alignment), having
// queued nothing: the caller adds the bias another way.
var ErrNoEpilogue = errorString("cuBLASLt has no algorithm for this product with a bias epilogue")

type errorString string

func (e errorString) Error() string { return string(e) }

// BlasStatus is a cublasStatus_t other than success.
type BlasStatus int

func blasErr(status int) error {
	if status == 0 {
		return nil
	}
	return BlasStatus(status)
}

var blasStatusNames = map[BlasStatus]string{
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

func (s BlasStatus) Error() string {
	if n, ok := blasStatusNames[s]; ok {
		return n
	}
	return "cublasStatus_t " + itoa(int(s))
}

func itoa(v int) string {
	if v < 0 {
		return "-" + itoa(-v)
	}
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}

// KernelCount is what the emulator counted of one kernel's launches.
// Bytes are distinct 32-byte sectors of device memory per launch, summed
// over the launches (see Counting).
type KernelCount struct {
	Name                  string
	Launches, Blocks      int64
	ReadBytes, WriteBytes int64
	Accesses              int64 // global-memory loads and stores, each counted
}

// GemmCount is what the emulator counted of the GEMMs of one combination
// of operand and compute types.
type GemmCount struct {
	AType, BType, CType   DataType
	Compute               ComputeType
	Calls, FMAs           int64
	ReadBytes, WriteBytes int64
}

// CopyCount is the calls and bytes of one kind of copy.
type CopyCount struct {
	Kind         string // "HtoD", "DtoH", "DtoD", "memset"
	Calls, Bytes int64
}

// Counts is what the emulator counted since CountLaunches.
type Counts struct {
	Kernels []KernelCount
	Gemms   []GemmCount
	Copies  []CopyCount
}
