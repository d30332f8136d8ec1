// Package devicetest is a conformance suite for memfit devices: Run builds
// small random inputs, runs every kernel of device.Kernels on a reference
// device (the CPU) and on the device under test, and compares the results
// with per-dtype tolerances (f32 1e-5, f16 1e-3, bf16 1e-2 relative to the
// larger of the value and the result's RMS), exactly where the contract is
// exact (Dropout's mask, copies, gathers, argmax, index errors). It also
// checks that both devices' allocators account every buffer the same way and
// return to where they started.
//
// It imports no device implementation, so every device's tests can call it:
//
//	devicetest.Run(t, cpu.New(), dev)
package devicetest
