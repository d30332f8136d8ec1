//go:build cuda && !cudaemu

// Package nvrtc is NVRTC as device/cuda uses it: gorgonia.org/cu/nvrtc with
// the build tag cuda, the emulator's host compiler with the tag cudaemu
// (see device/cuda/internal/cu).
package nvrtc

import "gorgonia.org/cu/nvrtc"

// Program is an NVRTC program.
type Program = nvrtc.Program

// CreateProgram makes a program of one source file.
func CreateProgram(source, name string) (Program, error) { return nvrtc.CreateProgram(source, name) }
