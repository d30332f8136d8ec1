// Package cpu is the CPU device: memory from the operating system
// (anonymous mappings outside the Go heap where the system has them, so a
// segment the allocator frees leaves the process at once; Go memory
// elsewhere) behind memfit's caching allocator (64-byte aligned, with an
// optional capacity so that out-of-memory can be met and tested on any
// machine) and pure-Go kernels that spread large
// operations over the cores GOMAXPROCS allows. Matrix products go to the
// gemm sub-package. 16-bit floats are converted on the fly, a bounded chunk
// at a time, and every kernel partitions its work in a fixed way, so results
// never depend on scheduling. The elementwise kernels are small structs run
// by value over a fixed-size loop nest, so that in steady state one below
// the parallel threshold makes no heap allocation (TestElementwiseAllocatesNothing);
// the row kernels (softmax, layer norm, cross-entropy) run as pooled jobs
// on persistent workers and take their row buffers from a bounded pool of
// scratch sets, so they allocate nothing per call at any thread count or
// row width (TestRowKernelsAllocateNothing, BenchmarkRowKernels).
package cpu
