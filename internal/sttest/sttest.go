// Package sttest edits safetensors files at the byte level for tests that
// damage checkpoints on purpose: flip a bit in a tensor, move a tensor's
// byte range, splice metadata or tensor bytes from another file. It
// splits and frames files with package safetensors' low-level functions
// (Split, Frame), which check nothing of the header, and keeps the header
// as raw JSON, so it reads and writes files the checked reader refuses.
package sttest

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/memfit/memfit/safetensors"
)

// File is a safetensors file split into its JSON header and data section.
type File struct {
	Header map[string]json.RawMessage
	Data   []byte
}

// Entry is one tensor's header entry; any values may be set, valid or not.
type Entry = safetensors.Entry

// Read splits the safetensors file at path.
func Read(t testing.TB, path string) *File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hj, data, err := safetensors.Split(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	f := &File{Data: data}
	if err := json.Unmarshal(hj, &f.Header); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// Write writes f to path, its header padded with spaces to 8 bytes.
func (f *File) Write(t testing.TB, path string) {
	t.Helper()
	hj, err := json.Marshal(f.Header)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(safetensors.Frame(hj), f.Data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Entry returns tensor name's header entry.
func (f *File) Entry(t testing.TB, name string) Entry {
	t.Helper()
	var e Entry
	if err := json.Unmarshal(f.Header[name], &e); err != nil {
		t.Fatalf("tensor %s: %v", name, err)
	}
	return e
}

// SetEntry replaces tensor name's header entry.
func (f *File) SetEntry(t testing.TB, name string, e Entry) {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	f.Header[name] = b
}

// Bytes returns the data bytes of tensor name (aliasing f.Data).
func (f *File) Bytes(t testing.TB, name string) []byte {
	t.Helper()
	o := f.Entry(t, name).Offsets
	return f.Data[o[0]:o[1]]
}

// Meta returns the __metadata__ map.
func (f *File) Meta(t testing.TB) map[string]string {
	t.Helper()
	m := map[string]string{}
	if raw, ok := f.Header["__metadata__"]; ok {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// SetMeta replaces the __metadata__ map.
func (f *File) SetMeta(t testing.TB, m map[string]string) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	f.Header["__metadata__"] = b
}

// Names returns the tensors' names, in no particular order.
func (f *File) Names() []string {
	var names []string
	for n := range f.Header {
		if n != "__metadata__" {
			names = append(names, n)
		}
	}
	return names
}
