//go:build cuda || cudaemu

package cuda

import (
	"path/filepath"
	"testing"
)

// TestPTXFile: the PTX kept on disk is named by the source and the
// options together, under $MEMFIT_CUDA_CACHE.
func TestPTXFile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CUDA_CACHE", dir)
	a := ptxFile("src", nvrtcOptions(9, 0))
	if filepath.Dir(a) != dir || filepath.Ext(a) != ".ptx" {
		t.Errorf("ptxFile = %s, want a .ptx file in %s", a, dir)
	}
	for _, b := range []string{ptxFile("src2", nvrtcOptions(9, 0)), ptxFile("src", nvrtcOptions(8, 0))} {
		if b == a {
			t.Errorf("another source or architecture shares the file %s", a)
		}
	}
	if ptxFile("src", nvrtcOptions(9, 0)) != a {
		t.Error("the same source and options name another file")
	}
}
