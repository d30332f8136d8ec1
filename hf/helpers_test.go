package hf_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/memfit/memfit/internal/sttest"
	"github.com/memfit/memfit/safetensors"
)

// edit returns the safetensors file at path with the tensors drop names
// removed and add's added, written whole by safetensors.Write: a valid
// file that differs from the fixture only in its tensors.
func edit(t *testing.T, path string, drop []string, add ...safetensors.Source) []byte {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gone := map[string]bool{}
	for _, n := range drop {
		gone[n] = true
	}
	srcs := add
	for _, n := range f.Names() {
		if !gone[n] {
			x, _ := f.Tensor(n)
			srcs = append(srcs, safetensors.Source{Name: n, DType: x.DType, Shape: x.Shape, Data: x.Data})
		}
	}
	out, err := os.CreateTemp(t.TempDir(), "edited")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := safetensors.Write(out, f.Header.Metadata, srcs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// damage returns the safetensors file at path with header entries set to
// the raw JSON given, the data section as it was: an invalid file, on
// purpose (internal/sttest writes what the checked reader refuses).
func damage(t *testing.T, path string, entries map[string]string) []byte {
	t.Helper()
	f := sttest.Read(t, path)
	for k, v := range entries {
		f.Header[k] = json.RawMessage(v)
	}
	out := filepath.Join(t.TempDir(), "damaged.safetensors")
	f.Write(t, out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
