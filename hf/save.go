package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/internal/atomicfile"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
)

// savedTensor is a parameter as a bare model holds it (nn.Export: LoRA
// adapters merged) under its Hugging Face name; conv: stored transposed
// (GPT-2's Conv1D).
type savedTensor struct {
	name string
	conv bool
	p    nn.Exported
}

// writeModel writes a model into dir as one whole: model.safetensors
// (params in dt, F32 or BF16, sorted by name), then config.json (cfg), each through
// atomicfile; then, if dir held a sharded checkpoint, the shards its index
// listed and the index itself are removed. One tensor at a time is
// converted as the writer reaches it: the export holds no second copy of
// the model.
//
// The order keeps a whole model at every point of a crash: until
// model.safetensors is renamed into place the old checkpoint is whole;
// from then on Open reads model.safetensors (it wins over an index) with
// the new weights, and config.json follows at once. Only between the two
// renames do the new weights stand beside the old config.json, which
// describes them when the export kept the model's shape (a fine-tune's);
// otherwise loading refuses them naming the first tensor whose shape
// differs, never reading stale shards. The index goes last, after the
// shards, so that an export that dies among the removals leaves an index
// the next export reads again to finish them.
func writeModel(dir string, cfg map[string]any, params []savedTensor, dt safetensors.DType) error {
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	srcs := make([]safetensors.Source, len(params))
	for i, p := range params {
		shape := append([]int(nil), p.p.Shape...)
		if p.conv {
			shape[0], shape[1] = shape[1], shape[0]
		}
		srcs[i] = safetensors.Source{Name: p.name, DType: dt, Shape: shape, Fill: func(w io.Writer) error {
			vals, err := p.p.Float32s()
			if err != nil {
				return fmt.Errorf("%s: %w", p.p.Name, err)
			}
			if p.conv {
				vals = transpose(vals, p.p.Shape[0], p.p.Shape[1])
			}
			return writeValues(w, dt, vals)
		}}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	meta := map[string]string{"format": "pt", "producer": "memfit"}
	err = atomicfile.Write(filepath.Join(dir, modelFile), func(w io.Writer) error {
		return safetensors.Write(w, meta, srcs)
	})
	if err != nil {
		return err
	}
	err = atomicfile.Write(filepath.Join(dir, configFile), func(w io.Writer) error {
		_, err := w.Write(append(cj, '\n'))
		return err
	})
	if err != nil {
		return err
	}
	return removeShards(dir)
}

// removeShards removes a sharded checkpoint that model.safetensors has
// replaced in dir: the shards dir's index lists, then the index. An index
// that is not a regular file, or that ReadIndex refuses, is left alone
// with whatever it names (Open prefers model.safetensors to it anyway):
// only files a valid index names, plain names beside it, are removed, and
// never model.safetensors or config.json.
func removeShards(dir string) error {
	index := filepath.Join(dir, indexFile)
	if _, err := os.Lstat(index); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	x, err := safetensors.ReadIndex(index)
	if err != nil {
		return nil
	}
	for _, shard := range x.Shards() {
		switch filepath.Base(shard) {
		case modelFile, configFile:
			continue
		}
		if err := os.Remove(shard); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hf: removing %s, a shard of the checkpoint %s replaced: %v", shard, filepath.Join(dir, modelFile), err)
		}
	}
	if err := os.Remove(index); err != nil {
		return fmt.Errorf("hf: removing %s, the index of the checkpoint %s replaced: %v", index, filepath.Join(dir, modelFile), err)
	}
	return nil
}

// Touches lists the files an export into dir writes or removes: its
// model.safetensors and config.json, and the index of a sharded
// checkpoint there with the shards it lists. A caller that must never
// overwrite an input (the trainer's -init, -data) checks them first.
func Touches(dir string) []string {
	out := []string{filepath.Join(dir, modelFile), filepath.Join(dir, configFile)}
	index := filepath.Join(dir, indexFile)
	if _, err := os.Lstat(index); err != nil {
		return out
	}
	out = append(out, index)
	if x, err := safetensors.ReadIndex(index); err == nil {
		out = append(out, x.Shards()...)
	}
	return out
}
