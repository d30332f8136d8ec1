//go:build unix

package regularfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every kind of path a user can name: regular files are read, the rest
// refused at once (a FIFO without a writer included) with the kind named.
func TestReadRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer l.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		limit      int64
		want       string // "" reads "hello"
		notRegular bool
	}{
		{"regular", small, 5, "", false},
		{"over the limit", small, 4, "5 bytes, over the limit of 4 bytes for this file", false},
		{"directory", dir, 1 << 20, "a directory, not a regular file", true},
		{"fifo", fifo, 1 << 20, "a named pipe (FIFO), not a regular file", true},
		{"link to a fifo", link, 1 << 20, "a named pipe (FIFO), not a regular file", true},
		{"socket", sock, 1 << 20, "a socket, not a regular file", true},
		{"character device", os.DevNull, 1 << 20, "a character device, not a regular file", true},
		{"missing", filepath.Join(dir, "missing"), 1 << 20, "no such file", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan struct{})
			var b []byte
			var err error
			go func() { b, err = Read(c.path, c.limit); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("Read(%s) blocks", c.path)
			}
			if c.want == "" {
				if err != nil || string(b) != "hello" {
					t.Fatalf("Read = %q, %v", b, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("Read(%s) = %v, want an error naming the path and %q", c.path, err, c.want)
			}
			var nr *NotRegularError
			if errors.As(err, &nr) != c.notRegular {
				t.Errorf("%v: a *NotRegularError: %v, want %v", err, !c.notRegular, c.notRegular)
			}
			var pe *fs.PathError
			if !errors.As(err, &pe) || pe.Path != c.path {
				t.Errorf("%v is not an *fs.PathError for %s", err, c.path)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		mode fs.FileMode
		want string
	}{
		{0o644, "a regular file"},
		{fs.ModeDir | 0o755, "a directory"},
		{fs.ModeNamedPipe, "a named pipe (FIFO)"},
		{fs.ModeDevice | fs.ModeCharDevice, "a character device"},
		{fs.ModeDevice, "a device"},
		{fs.ModeSocket, "a socket"},
		{fs.ModeSymlink, "a symbolic link"},
		{fs.ModeIrregular, "an irregular file"},
	} {
		if got := Describe(c.mode); got != c.want {
			t.Errorf("Describe(%v) = %q, want %q", c.mode, got, c.want)
		}
	}
}

func TestTooLargeUnits(t *testing.T) {
	for _, c := range []struct {
		e    TooLargeError
		want string
	}{
		{TooLargeError{Size: 3 << 20, Limit: 1 << 20}, "3145728 bytes, over the limit of 1 MiB for this file"},
		{TooLargeError{Size: -1, Limit: 16 << 30}, "over the limit of 16 GiB for this file"},
		{TooLargeError{Size: 2000, Limit: 1000}, "2000 bytes, over the limit of 1000 bytes for this file"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}
