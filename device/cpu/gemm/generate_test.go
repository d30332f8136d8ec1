package gemm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The committed assembly must be what gen.go writes: an edit by hand would
// be lost at the next go generate, and an edit of gen.go not run would
// leave the kernels out of date.
func TestGeneratedAssemblyIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go run gen.go")
	}
	dir := t.TempDir()
	if out, err := exec.Command("go", "run", "gen.go", "-o", dir).CombinedOutput(); err != nil {
		t.Fatalf("go run gen.go: %v\n%s", err, out)
	}
	for _, name := range []string{"kernel_amd64.s", "transpose_amd64.s"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what gen.go writes: run go generate ./device/cpu/gemm", name)
		}
	}
}
