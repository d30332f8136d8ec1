//go:build unix

package safetensors_test

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memfit/memfit/safetensors"
)

// Non-regular files are refused before they are opened: a FIFO would
// block the open for good.
func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.safetensors")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, c := range []struct{ path, want string }{{fifo, "named pipe"}, {dir, "directory"}, {filepath.Join(dir, "missing"), "no such file"}} {
		done := make(chan error, 1)
		go func() { _, err := safetensors.Open(c.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("%s: error %v, want one naming it and saying %q", c.path, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Open(%s) blocked", c.path)
		}
		done2 := make(chan error, 1)
		go func() { _, err := safetensors.ReadIndex(c.path); done2 <- err }()
		select {
		case err := <-done2:
			if err == nil {
				t.Errorf("ReadIndex(%s) read it", c.path)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ReadIndex(%s) blocked", c.path)
		}
	}
}
