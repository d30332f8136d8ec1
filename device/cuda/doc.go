// Package cuda is memfit's NVIDIA GPU device, built on gorgonia.org/cu
// (the CUDA driver API), cuBLAS and NVRTC.
//
// The device is compiled only with the cuda build tag:
//
//	go build -tags cuda ./...
//
// which needs cgo, the CUDA 12 toolkit's headers and libraries (libcuda,
// libcublas, libnvrtc) and, to run, a driver and a GPU. Without the tag,
// [New] returns an error that says how to rebuild and [Available] reports
// false, so that programs such as cmd/train compile everywhere.
//
// With the build tag cudaemu instead, the same code runs on a CPU emulator
// of CUDA (internal/cu): no toolkit, driver or GPU, only cgo and g++.
//
//	go test -tags cudaemu ./device/cuda/... ./train/
//
// kernels.cu is compiled by g++ where NVRTC would compile it, each CUDA
// thread of a block runs as a fiber that interleaves with the others at
// barriers and warp primitives, every global-memory access (GMEM in
// kernels.cu) and GEMM operand is checked against the live allocations,
// and shared memory reads as NaN until written. [Emulated] says which
// build this is. The emulator also counts each kernel's launches and the
// bytes they read and write ([Device.LaunchCounts]), which cmd/stepbench
// -kernels prints.
//
// # What lives where
//
// Files without a build tag hold the logic that needs no GPU and is unit
// tested in every build: the CUDA C kernel source (kernels.cu, embedded) and
// the prelude generated from Go's constants, the packing of views into the
// kernels' argument structs (shapes and strides after merging dimensions),
// launch geometry, and the mapping of memfit's row-major GEMM onto cuBLAS's
// column-major one. Files tagged "cuda || cudaemu" hold the device itself,
// written against internal/cu and internal/nvrtc, which are gorgonia.org/cu
// and this package's own cgo with the tag cuda, and the emulator with the
// tag cudaemu:
//
//   - one CUDA context per Device (the device's primary context); driver
//     calls run one at a time on the calling goroutine, its OS thread locked
//     for the call and the context made current on it first (handing each
//     call to a thread of its own cost more than the launch it made);
//   - a raw allocator over cuMemAlloc/cuMemFree under the same caching
//     allocator as every device (memory.New), its capacity the GPU's total
//     memory or the limit given with [MemLimit];
//   - a compute stream on which every kernel, GEMM and copy runs in order,
//     and a copy stream for asynchronous host-to-device copies out of
//     [PinnedBuffer]s, which the compute stream waits for with an event;
//   - kernels compiled from kernels.cu by NVRTC on first use, for the GPU's
//     compute capability, and kept for the device's lifetime;
//   - GEMM through cuBLAS (cublasGemmEx and cublasGemmStridedBatchedEx with
//     f32 accumulation for f16 and bf16: tensor cores, CUBLAS_GEMM_DEFAULT
//     picks them on Ampere and later), called through internal/cu's own
//     cgo because gorgonia.org/cu/blas has neither these nor cublasSetStream;
//     a bias is written into C first (device.BiasFirst) and the product
//     adds to it;
//   - reductions (Reduce, softmax, layer norm, cross-entropy) in float for
//     f32, f16 and bf16 data (double for f64) with warp shuffles: one block
//     per row, or per 8 columns where the kept dimensions are innermost
//     (bias and layer-norm parameter gradients);
//   - causal attention as tiled kernels for f32, f16 and bf16 heads of up
//     to 128 elements (k_flash_*: query tiles per block, keys and values
//     streamed through shared memory, online softmax, only the output and
//     one log-sum-exp per row in global memory; backward in two kernels
//     without atomics), on tensor cores (mma.sync, k_flash_*_tc_*) for
//     f16 and bf16 heads on GPUs of compute capability 8.0 and later, on
//     CUDA cores otherwise; else the slot kernels.
//
// # Errors
//
// New, Close, Synchronize and the pinned-memory calls return errors. Kernels
// have no error result (see device.Kernels): a failing CUDA call panics with
// an [*Error], and an out-of-range index with a *device.IndexError, as on the
// CPU. CUDA reports many failures of asynchronous work at a later call; an
// illegal address leaves the context unusable and every later call fails.
//
// # Without a driver
//
// gorgonia.org/cu calls cuInit in its package init and exits the process
// when it fails. internal/probe (imported by internal/cu) initialises first (Go
// initialises packages in import-path order where dependencies allow) and
// replaces that exit with one clear message: a test binary exits 0 after
// printing that the CUDA tests were skipped; any other binary exits 1 after
// saying that it was built with -tags cuda on a machine without a usable
// driver.
package cuda
