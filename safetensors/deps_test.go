package safetensors_test

import (
	"go/build"
	"strings"
	"testing"
)

// The package imports only the standard library, so that any part of
// memfit, and its tests' tools, may use it.
func TestStandardLibraryOnly(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range p.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("safetensors imports %s, outside the standard library", imp)
		}
	}
}
