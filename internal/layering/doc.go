// Package layering holds no code: its test fails when a package imports
// one it must not (an upward import across memfit's strata, or
// gorgonia.org/cu outside device/cuda, whose package init exits the process
// on machines without a CUDA driver).
package layering
