package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
)

// TestKernelNames checks that kernels.cu defines exactly the entry points
// the Go side looks up.
func TestKernelNames(t *testing.T) {
	var defined []string
	for _, m := range regexp.MustCompile(`(?m)^TYPED\((\w+),`).FindAllStringSubmatch(kernelsCU, -1) {
		defined = append(defined, m[1]+sfx32, m[1]+sfx64)
	}
	for _, m := range regexp.MustCompile(`extern "C" __global__ void (?:FA_BOUNDS )?(\w+)(?:\(| FA_\w+_ARGS)`).FindAllStringSubmatch(kernelsCU, -1) {
		if m[1] != "name" { // COPY_RAW's own definition
			defined = append(defined, m[1])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^COPY_RAW\((\w+),`).FindAllStringSubmatch(kernelsCU, -1) {
		defined = append(defined, m[1])
	}
	want := kernelNames()
	slices.Sort(defined)
	slices.Sort(want)
	if !slices.Equal(defined, want) {
		t.Errorf("kernels.cu defines\n%v\nGo launches\n%v", defined, want)
	}
}

// TestPreludeCoversSource checks that every constant kernels.cu uses comes
// from the generated prelude, and that the prelude names every operation.
func TestPreludeCoversSource(t *testing.T) {
	p := prelude()
	for _, m := range regexp.MustCompile(`\b(?:DT|UN|BIN|RED|DIST|POOL)_[A-Z0-9_]+\b`).FindAllString(kernelsCU, -1) {
		if !strings.Contains(p, "#define "+m+" ") {
			t.Errorf("kernels.cu uses %s, which the prelude does not define", m)
		}
	}
	for op := device.UnaryOp(0); op < device.NumUnaryOps; op++ {
		name := "UN_" + strings.ToUpper(op.String())
		if !strings.Contains(kernelsCU, name) {
			t.Errorf("kernels.cu does not implement %s", name)
		}
	}
	for op := device.BinaryOp(0); op < device.NumBinaryOps; op++ {
		name := "BIN_" + strings.ToUpper(op.String())
		if !strings.Contains(kernelsCU, name) {
			t.Errorf("kernels.cu does not implement %s", name)
		}
	}
}

func TestNVRTCOptions(t *testing.T) {
	opts := nvrtcOptions(8, 6)
	if opts[0] != "--gpu-architecture=compute_86" {
		t.Errorf("arch option %q", opts[0])
	}
}

// TestKernelSourceCompilesAsHostCpp type-checks the generated source with
// g++ against the CUDA emulator's device environment
// (internal/cu/emu/kernel.h): no GPU, toolkit or cudaemu build is needed to
// catch syntax and type errors before NVRTC sees the source.
func TestKernelSourceCompilesAsHostCpp(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: kernel source not type-checked")
	}
	dir := t.TempDir()
	emu, err := filepath.Abs("internal/cu/emu")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kernels.cc")
	if err := os.WriteFile(path, []byte(source()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unused-function", "-Wno-unused-variable",
		"-I", emu, "-include", filepath.Join(emu, "kernel.h"), path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("g++ on kernels.cu: %v\n%s", err, out)
	}
}

// TestGlobalAccessesGoThroughGMEM keeps every global-memory access of
// kernels.cu checkable by the CUDA emulator: a raw cast-and-index of an
// operand's pointer would bypass the bounds check.
func TestGlobalAccessesGoThroughGMEM(t *testing.T) {
	raw := regexp.MustCompile(`\(\((?:const\s+)?\w+\s*\*\)\s*\w+(?:\.p)?\)\s*\[`)
	for i, line := range strings.Split(kernelsCU, "\n") {
		if strings.Contains(line, "#define GMEM") {
			continue
		}
		if raw.MatchString(line) {
			t.Errorf("kernels.cu:%d indexes a pointer directly; write GMEM(type, p, i):\n%s", i+1, line)
		}
	}
}
