//go:build cudaemu

// Package nvrtc is NVRTC as device/cuda uses it: gorgonia.org/cu/nvrtc with
// the build tag cuda, the emulator's host compiler with the tag cudaemu
// (see device/cuda/internal/cu).
package nvrtc

import (
	"errors"

	"github.com/memfit/memfit/device/cuda/internal/cu"
)

// Program is a kernel source for the emulator.
type Program struct {
	source, name string
	image, log   string
}

// CreateProgram makes a program of one source file.
func CreateProgram(source, name string) (Program, error) {
	return Program{source: source, name: name}, nil
}

// Compile compiles the program for the host; the options (a GPU
// architecture) do not apply.
func (p *Program) Compile(options ...string) error {
	image, log, err := cu.CompileKernels(p.source, p.name)
	p.log = log
	if err != nil {
		return err
	}
	p.image = image
	return nil
}

// GetPTX returns the compiled image (not PTX: a module of the emulator).
func (p *Program) GetPTX() (string, error) {
	if p.image == "" {
		return "", errors.New("nvrtc: program not compiled")
	}
	return p.image, nil
}

// GetLog returns the compiler's output.
func (p *Program) GetLog() (string, error) { return p.log, nil }

// Destroy does nothing.
func (p *Program) Destroy() error { return nil }
