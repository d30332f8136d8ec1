package atomicfile_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/memfit/memfit/internal/atomicfile"
)

// leftovers lists the temporary files Write may have left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".*.tmp*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWrite(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		old     string // "" : no file before
		write   func(w io.Writer) error
		want    string // the file afterwards
		wantErr error
	}{
		{"create", "", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, "new", nil},
		{"replace", "old contents", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, "new", nil},
		{"empty", "old", func(io.Writer) error { return nil }, "", nil},
		{"failed write keeps the old file", "old", func(w io.Writer) error { io.WriteString(w, "par"); return boom }, "old", boom},
		{"writer is the file itself", "", func(w io.Writer) error {
			f := w.(*os.File) // data's shard writer fills its header with WriteAt
			if _, err := f.Write([]byte("xxxxBODY")); err != nil {
				return err
			}
			_, err := f.WriteAt([]byte("HEAD"), 0)
			return err
		}, "HEADBODY", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.bin")
			if c.old != "" {
				if err := os.WriteFile(path, []byte(c.old), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := atomicfile.Write(path, c.write)
			if err != c.wantErr {
				t.Fatalf("error %v, want %v (write's own, unchanged)", err, c.wantErr)
			}
			got, rerr := os.ReadFile(path)
			if rerr != nil && !(c.old == "" && c.wantErr != nil) {
				t.Fatal(rerr)
			}
			if string(got) != c.want {
				t.Errorf("file holds %q, want %q", got, c.want)
			}
			if err == nil {
				fi, _ := os.Stat(path)
				if fi.Mode().Perm() != atomicfile.Perm {
					t.Errorf("mode %v, want %v", fi.Mode().Perm(), os.FileMode(atomicfile.Perm))
				}
			}
			if l := leftovers(t, dir); len(l) != 0 {
				t.Errorf("temporary files left: %v", l)
			}
		})
	}
}

// A directory that does not exist fails before anything is written.
func TestWriteMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "out")
	called := false
	err := atomicfile.Write(path, func(io.Writer) error { called = true; return nil })
	if err == nil || called {
		t.Fatalf("error %v, write called %v: want an error before write", err, called)
	}
}

// Rename over a directory fails and leaves the temporary file for the
// caller; the directory is untouched.
func TestRename(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "build.so")
	if err := os.WriteFile(from, []byte("image"), 0o755); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, "cache.so")
	if err := atomicfile.Rename(from, to); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(to); err != nil || string(b) != "image" {
		t.Fatalf("%s holds %q, %v", to, b, err)
	}
	if _, err := os.Stat(from); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", from, err)
	}
	if fi, _ := os.Stat(to); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v: Rename must keep the file's mode", fi.Mode().Perm())
	}

	if err := os.WriteFile(from, []byte("again"), 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Rename(from, sub); err == nil {
		t.Error("renamed a file over a non-empty directory")
	}
	if _, err := os.Stat(from); err != nil {
		t.Errorf("the source was lost on a failed rename: %v", err)
	}
	if err := atomicfile.Rename(filepath.Join(dir, "missing"), to); err == nil {
		t.Error("renamed a file that does not exist")
	}
}

func ExampleWrite() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "notes.txt")
	err := atomicfile.Write(path, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, "whole or not at all")
		return err
	})
	b, _ := os.ReadFile(path)
	fmt.Print(string(b), err)
	// Output:
	// whole or not at all
	// <nil>
}
