//go:build cuda && !cudaemu

// Package probe initialises the CUDA driver before gorgonia.org/cu does, so
// that a machine without a usable driver gets one clear message instead of
// gorgonia's os.Exit(1) from its package init.
//
// It works because Go initialises packages in import-path order wherever
// dependencies allow: this package's path sorts before gorgonia.org/cu and
// it imports nothing cu does not, so its init runs first. When cuInit fails
// it prints why and exits: with status 0 in a test binary (the CUDA tests
// are skipped; nothing else could run them), with status 1 otherwise (as
// gorgonia would, but saying what to do).
package probe

// #cgo LDFLAGS: -lcuda
// #cgo linux LDFLAGS: -L/usr/local/cuda/lib64
// #cgo linux CFLAGS: -I/usr/local/cuda/include
// #include <cuda.h>
// static int memfit_cu_init(void) { return (int)cuInit(0); }
import "C"

import "os"

// Status is cuInit's result (0: the driver is usable). By the time any
// code can read it, it is 0: the process has exited otherwise.
var Status int

func init() {
	Status = int(C.memfit_cu_init())
	if Status == 0 {
		return
	}
	code := itoa(Status)
	if isTest() {
		os.Stdout.WriteString("memfit/device/cuda: no usable CUDA driver or GPU (cuInit returned " + code +
			"); skipping every CUDA test of this binary\n")
		os.Exit(0)
	}
	os.Stderr.WriteString("memfit: this binary was built with -tags cuda, but the CUDA driver cannot start (cuInit returned " + code +
		"; 100 means no GPU, 35 or 999 a missing or mismatched driver, 34 the toolkit's stub libcuda).\n" +
		"gorgonia.org/cu cannot run without one. On a machine without a GPU, build without -tags cuda and use -device cpu.\n")
	os.Exit(1)
}

// isTest reports whether this is a Go test binary: its name ends in .test
// or it was given -test.* flags (go test always passes some).
func isTest() bool {
	if n := len(os.Args[0]); n >= 5 && os.Args[0][n-5:] == ".test" {
		return true
	}
	for _, a := range os.Args[1:] {
		if len(a) > 6 && (a[:6] == "-test." || (len(a) > 7 && a[:7] == "--test.")) {
			return true
		}
	}
	return false
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var b [20]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
