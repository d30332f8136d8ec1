package tensor

import (
	"runtime"
	"testing"
)

func TestSitePath(t *testing.T) {
	for _, c := range []struct {
		fn, file, want string
	}{
		{"github.com/memfit/memfit/models.(*GPT).Forward", "/build/x/models/gpt.go", "models/gpt.go"},
		{"github.com/memfit/memfit/tensor_test.TestX", "/home/u/memfit/tensor/a_test.go", "tensor/a_test.go"},
		{"github.com/memfit/memfit/device/cpu.(*Device).Gemm", "/src/device/cpu/matmul.go", "device/cpu/matmul.go"},
		{"example.com/trainer/loop.step.func1", "/home/u/trainer/loop/step.go", "example.com/trainer/loop/step.go"},
		{"main.main", "/home/u/cmd/mytrain/main.go", "mytrain/main.go"},
		{"", "/somewhere/f.go", "/somewhere/f.go"},
	} {
		if got := sitePath(runtime.Frame{Function: c.fn, File: c.file}); got != c.want {
			t.Errorf("sitePath(%s, %s) = %q, want %q", c.fn, c.file, got, c.want)
		}
	}
}
