// Package gemm owns memfit's CPU matrix-multiply kernels: single, double,
// bfloat16 and half precision GEMM on row-major matrices.
//
// Every entry point computes C = alpha*op(A)*op(B) + beta*C, where op(X) is X
// or its transpose, op(A) is m×k, op(B) is k×n and C is m×n, all row-major
// with row strides lda, ldb and ldc (in elements). beta == 0 overwrites C, so
// NaNs or garbage already in C never reach the result.
//
// The package owns:
//
//   - packing of op(A) and op(B) into kernel-friendly panels, converting
//     half precision and bfloat16 to float32 while packing (with AVX-512
//     where the CPU has it), except for bfloat16 on AMD CPUs with
//     AVX512-BF16, whose pairs go to VDPBF16PS (on Intel's it runs at half
//     the float32 FMA rate; the choice follows the CPU's vendor, never a
//     timing, so every run on one machine rounds alike);
//   - cache blocking (MC×KC blocks of A in L2, KC×NR micro-panels of B in L1);
//   - the micro-kernels: AVX-512 and AVX2+FMA float32 kernels and an
//     AVX512-BF16 (VDPBF16PS) kernel in Go assembly on amd64, chosen at run
//     time from golang.org/x/sys/cpu, and portable Go kernels everywhere
//     else (and under the purego build tag);
//   - the products' epilogue: a bias row added to every row of C
//     (Options.Bias), before a 16-bit C's one rounding;
//   - splitting one large product over goroutines (SetThreads).
//
// It does not own batching: device/cpu spreads batches of small products
// over goroutines and calls these functions once per matrix. All functions
// are safe for concurrent use. Steady-state calls do not allocate.
//
// Slices that are too short for the given shapes and strides make the
// functions panic: shapes are checked by the callers above, so a short slice
// here is a programming error.
package gemm

//go:generate go run gen.go
