//go:build unix

package data

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe given as a data file, or among a directory's files, is
// refused at once, never waited on (opening one for reading blocks until
// a writer comes).
func TestFIFOsAreRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "train.bin")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, c := range []struct {
		name string
		open func() error
	}{
		{"shard", func() error { _, err := OpenShards(fifo, WindowOptions{Context: 8}); return err }},
		{"shard glob", func() error {
			_, err := OpenShards(filepath.Join(dir, "*.bin"), WindowOptions{Context: 8})
			return err
		}},
		{"corpus", func() error { _, err := OpenCorpus([]string{fifo}, WindowOptions{Context: 8}); return err }},
		{"idx", func() error { _, err := OpenIDX(fifo); return err }},
		{"records", func() error { _, err := OpenRecords(fifo); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- c.open() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "named pipe") {
					t.Errorf("error %v, want one naming %s as a named pipe", err, fifo)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("blocked on the FIFO")
			}
		})
	}
}
