// Package devicetest is a conformance suite for memfit devices: Run builds
// small random inputs, runs every kernel of device.Kernels and every
// capability (through device's package-level functions, so a device
// without one is checked on the composed fallback) on the device under
// test, and compares the results with a reference that shares no code
// with any device: float64 on the host through gonum (blas64 for the
// products, floats for sums, dot products and extrema, plain float64 Go
// for elementwise functions; reference.go). The reference is rounded to
// each result's dtype, and rounds where the contract stores an
// intermediate in the tested dtype (a forward's output its backward
// reads, attention's 16-bit probabilities). Tolerances are per dtype (f32
// 1e-5, f16 1e-3, bf16 1e-2 relative to the larger of the value and the
// result's RMS: a little over one unit in the last place), plus, for sums
// of many terms (products, reductions, col2im), the bound n·u·Σ|terms|
// that any order of accumulation in F32 meets. Results are exact where
// the contract is (fills, copies, gathers, im2col, masks, argmax, the
// dropout mask, index errors, and the 8-bit Adam and stochastic-rounding
// steps, whose definitions in package device are their reference; those
// two also run through device.Without to check the fallback bit for
// bit). Run also checks that every temporary a kernel takes is freed.
//
// RunAccounting runs the same cases on a device that computes nothing
// (the meta device) and on a reference device, and compares what their
// allocators saw.
//
// It imports no device implementation, so every device's tests can call
// it:
//
//	devicetest.Run(t, dev)
package devicetest
