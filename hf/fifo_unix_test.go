//go:build unix

package hf_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/hf"
)

// A FIFO in place of any file of a checkpoint is refused at once, naming
// it: opening one for reading would wait for a writer forever.
func TestLoadRefusesFIFOs(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the FIFO's name
	}{
		{"config.json", func(t *testing.T, dir string) string {
			copyFile(t, "testdata/gpt2-f32/model.safetensors", filepath.Join(dir, "model.safetensors"))
			return "config.json"
		}},
		{"model.safetensors", func(t *testing.T, dir string) string {
			copyFile(t, "testdata/gpt2-f32/config.json", filepath.Join(dir, "config.json"))
			return "model.safetensors"
		}},
		{"index", func(t *testing.T, dir string) string {
			copyFile(t, "testdata/gpt2-f32/config.json", filepath.Join(dir, "config.json"))
			return "model.safetensors.index.json"
		}},
		{"shard", func(t *testing.T, dir string) string {
			shards := shard(t, "testdata/gpt2-f32", dir)
			os.Remove(filepath.Join(dir, shards[1]))
			return shards[1]
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fifo := filepath.Join(dir, c.setup(t, dir))
			if err := syscall.Mkfifo(fifo, 0o644); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := hf.Load(cpu.New(), dir, hf.Options{})
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "named pipe") {
					t.Errorf("error %v, want one naming %s as a named pipe", err, fifo)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("loading blocked on the FIFO %s", fifo)
			}
		})
	}
}
