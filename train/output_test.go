package train

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestWriteOutputStreams: a stream named through /proc's magic links
// (what /dev/stdout is) is written through, whatever the link reads.
func TestWriteOutputStreams(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc/self/fd")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	path := fmt.Sprintf("/proc/self/fd/%d", w.Fd())
	got := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	if _, _, err := ResolveOutput(path, FileOnly); err == nil {
		t.Errorf("a pipe accepted as a checkpoint path")
	}
	err = WriteFileAtomic(path, []byte("summary\n"))
	w.Close()
	if err != nil {
		t.Fatalf("WriteFileAtomic(%s): %v", path, err)
	}
	if s := <-got; s != "summary\n" {
		t.Errorf("the pipe's reader got %q", s)
	}
}

// TestWriteOutputDanglingLink: a link to a file not yet there creates the
// file and keeps the link.
func TestWriteOutputDanglingLink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "out.json")
	if err := os.Symlink("later.json", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(link, []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "later.json")); err != nil || string(b) != "{}\n" {
		t.Errorf("link target holds %q, %v", b, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced")
	}
}
