package hf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/memfit/memfit/internal/regularfile"
	"github.com/memfit/memfit/safetensors"
)

// Tensor is one tensor of a checkpoint: its dtype as safetensors names it
// (F32, F16, BF16, U8, ...), its shape, and its little-endian bytes, which
// alias the file's memory map until the checkpoint is closed.
type Tensor = safetensors.Tensor

// The files of a checkpoint directory.
const (
	modelFile  = "model.safetensors"
	indexFile  = safetensors.IndexName
	configFile = "config.json"
)

// maxConfig bounds config.json: real ones are a few kilobytes.
const maxConfig = 16 << 20

// Checkpoint is a model's tensors across one or more safetensors files.
type Checkpoint struct {
	Dir string
	set *safetensors.Set
}

// Open opens a checkpoint: a .safetensors file, an index
// (model.safetensors.index.json) and the shards it lists, or a directory
// holding either (or config.json alone: a shape without weights, which
// only a plan builds; Weights). A directory's model.safetensors wins over its index, as
// transformers' loader decides: an export (Save) commits model.safetensors
// before it removes an older sharded checkpoint's index, so a crash in
// between leaves the new model the one read. Every file is checked
// (package safetensors: headers against data, the index against the
// shards) and opened only once it is known to be a regular file.
func Open(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("hf: %v", err)
	}
	c := &Checkpoint{Dir: path}
	switch {
	case st.IsDir():
		model, index := filepath.Join(path, modelFile), filepath.Join(path, indexFile)
		_, err = os.Stat(model)
		switch {
		case err == nil:
			c.set, err = safetensors.OpenFiles(model)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("hf: %v", err)
		default:
			if _, ierr := os.Stat(index); errors.Is(ierr, fs.ErrNotExist) {
				if _, cerr := os.Stat(filepath.Join(path, configFile)); cerr == nil {
					// config.json alone: a model's shape, to plan
					// before the weights are downloaded (Weights).
					return c, nil
				}
				return nil, fmt.Errorf("hf: %s holds neither %s nor %s", path, modelFile, indexFile)
			}
			c.set, err = safetensors.OpenIndex(index)
		}
		if err != nil {
			return nil, err
		}
	case st.Mode().IsRegular():
		c.Dir = filepath.Dir(path)
		if strings.HasSuffix(path, ".index.json") {
			c.set, err = safetensors.OpenIndex(path)
		} else {
			c.set, err = safetensors.OpenFiles(path)
		}
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("hf: %s is not a checkpoint: neither a directory nor a regular file (mode %v)", path, st.Mode().Type())
	}
	return c, nil
}

// Weights reports whether the checkpoint holds tensors: a directory of
// config.json alone (Open takes one) describes a model's shape, which a
// plan needs, and nothing to load.
func (c *Checkpoint) Weights() bool { return c.set != nil }

// Tensor returns a tensor by name.
func (c *Checkpoint) Tensor(name string) (Tensor, bool) {
	if c.set == nil {
		return Tensor{}, false
	}
	return c.set.Tensor(name)
}

// Names lists the tensors, sorted.
func (c *Checkpoint) Names() []string {
	if c.set == nil {
		return nil
	}
	return c.set.Names()
}

// Close unmaps the files: the tensors' Data is invalid afterwards.
func (c *Checkpoint) Close() error {
	if c.set == nil {
		return nil
	}
	err := c.set.Close()
	c.set = nil
	return err
}

// readConfig reads dir's config.json, refusing anything but a regular
// file before opening it (a FIFO would block) and one over maxConfig. A
// missing file is no error: b is nil.
func readConfig(dir string) (b []byte, path string, err error) {
	path = filepath.Join(dir, configFile)
	b, err = regularfile.Read(path, maxConfig)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, path, nil
	}
	if err != nil {
		return nil, path, fmt.Errorf("hf: %v", err)
	}
	return b, path, nil
}
