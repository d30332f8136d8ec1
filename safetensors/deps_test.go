package safetensors_test

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// The package imports only the standard library and memfit's internal
// packages that do the same, so that any part of memfit, and its tests'
// tools, may use it.
func TestStandardLibraryOnly(t *testing.T) {
	seen := map[string]bool{}
	var check func(importer, dir string)
	check = func(importer, dir string) {
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range p.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if !strings.Contains(first, ".") || seen[imp] {
				continue
			}
			seen[imp] = true
			const internal = "github.com/memfit/memfit/internal/"
			if !strings.HasPrefix(imp, internal) {
				t.Errorf("%s imports %s, outside the standard library", importer, imp)
				continue
			}
			check(imp, filepath.Join("..", "internal", strings.TrimPrefix(imp, internal)))
		}
	}
	check("safetensors", ".")
}
