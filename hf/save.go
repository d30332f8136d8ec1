package hf

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

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

// ShardBytes is the size past which an export is sharded, as
// transformers' save_pretrained shards at its default max_shard_size of
// 5 GB: model-00001-of-0000N.safetensors files of at most that many
// bytes each (a tensor larger alone in its own) and
// model.safetensors.index.json mapping every tensor to its file.
const ShardBytes = 5_000_000_000

// companions are the files an export writes beside the weights and
// config.json when it has them (SaveOptions): a tokenizer's, the
// generation config, and a LoRA run's adapters in PEFT's layout.
var companions = []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
	"generation_config.json", peftWeights, peftConfig}

// writeModel writes a model into dir as one whole: its weights (params in
// dt, F32 or BF16, sorted by name; sharded past o.ShardBytes), then
// config.json (cfg), then o's companion files, each through atomicfile;
// then what an older checkpoint there had and this one does not (a
// sharded one's index and shards, or model.safetensors) is removed. One
// tensor at a time is converted as the writer reaches it: the export
// holds no second copy of the model.
//
// The order keeps a whole model at every point of a crash. Unsharded:
// until model.safetensors is renamed into place the old checkpoint is
// whole; from then on Open reads model.safetensors (it wins over an
// index) with the new weights, and config.json follows at once. Only
// between the two renames do the new weights stand beside the old
// config.json, which describes them when the export kept the model's
// shape (a fine-tune's); otherwise loading refuses them naming the first
// tensor whose shape differs, never reading stale shards. The index goes
// last, after the shards, so that an export that dies among the removals
// leaves an index the next export reads again to finish them. Sharded:
// the shards are written under names no file in dir has (the standard
// ones, else with a tag), so no file of the old checkpoint changes; the
// new index is renamed over the old one, and removing an old
// model.safetensors (which would win over it) commits the new weights.
func writeModel(dir string, cfg map[string]any, params []savedTensor, dt safetensors.DType, files []namedFile, limit int64) error {
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	srcs := make([]safetensors.Source, len(params))
	sizes := make([]int64, len(params))
	for i, p := range params {
		shape := append([]int(nil), p.p.Shape...)
		if p.conv {
			shape[0], shape[1] = shape[1], shape[0]
		}
		if sizes[i], err = safetensors.ByteSize(dt, shape); err != nil {
			return fmt.Errorf("hf: %s: %v", p.name, err)
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
	if limit <= 0 {
		limit = ShardBytes
	}
	shards := shardSources(srcs, sizes, limit)
	meta := map[string]string{"format": "pt", "producer": "memfit"}
	var old []string // an older sharded checkpoint's shards, which this export replaces
	if x, err := safetensors.ReadIndex(filepath.Join(dir, indexFile)); err == nil {
		old = x.Shards()
	}
	if len(shards) == 1 {
		err = atomicfile.Write(filepath.Join(dir, modelFile), func(w io.Writer) error {
			return safetensors.Write(w, meta, srcs)
		})
		if err != nil {
			return err
		}
	} else {
		names := shardNames(dir, len(shards))
		weightMap := map[string]string{}
		var total int64
		for i, s := range shards {
			err := atomicfile.Write(filepath.Join(dir, names[i]), func(w io.Writer) error {
				return safetensors.Write(w, meta, s)
			})
			if err != nil {
				return err
			}
			for _, t := range s {
				weightMap[t.Name] = names[i]
				n, _ := safetensors.ByteSize(t.DType, t.Shape)
				total += n
			}
		}
		index, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}, "", "  ")
		if err != nil {
			return err
		}
		if err := writeBytes(filepath.Join(dir, indexFile), index); err != nil {
			return err
		}
		// The commit: model.safetensors would win over the new index.
		if err := os.Remove(filepath.Join(dir, modelFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hf: removing %s, which the sharded export %s replaces: %v", filepath.Join(dir, modelFile), filepath.Join(dir, indexFile), err)
		}
		syncDir(dir)
		keep := map[string]bool{}
		for _, n := range names {
			keep[filepath.Join(dir, n)] = true
		}
		old = slices.DeleteFunc(old, func(p string) bool { return keep[p] })
	}
	if err := writeBytes(filepath.Join(dir, configFile), cj); err != nil {
		return err
	}
	for _, f := range files {
		if err := writeBytes(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	if len(shards) == 1 {
		return removeShards(dir)
	}
	for _, p := range old {
		switch filepath.Base(p) {
		case modelFile, configFile, indexFile:
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("hf: removing %s, a shard of the checkpoint %s replaced: %v", p, filepath.Join(dir, indexFile), err)
		}
	}
	return nil
}

// shardSources cuts srcs, in order, into runs of at most limit bytes (a
// tensor over the limit alone in its run), as save_pretrained fills its
// shards.
func shardSources(srcs []safetensors.Source, sizes []int64, limit int64) [][]safetensors.Source {
	var out [][]safetensors.Source
	var cur []safetensors.Source
	var n int64
	for i, s := range srcs {
		if len(cur) > 0 && n+sizes[i] > limit {
			out = append(out, cur)
			cur, n = nil, 0
		}
		cur = append(cur, s)
		n += sizes[i]
	}
	return append(out, cur)
}

// shardNames are the files of an export of n shards into dir:
// transformers' model-00001-of-0000n.safetensors, unless a file of one
// of those names is there (an older checkpoint's, which must stay whole
// until the new index commits), then the same with a random tag.
func shardNames(dir string, n int) []string {
	names := make([]string, n)
	tag := ""
	for attempt := 0; ; attempt++ {
		free := true
		for i := range names {
			names[i] = fmt.Sprintf("model-%05d-of-%05d%s.safetensors", i+1, n, tag)
			if _, err := os.Lstat(filepath.Join(dir, names[i])); !errors.Is(err, fs.ErrNotExist) {
				free = false
			}
		}
		if free || attempt > 8 {
			return names
		}
		b := make([]byte, 4)
		rand.Read(b)
		tag = "-" + hex.EncodeToString(b)
	}
}

// writeBytes replaces path with b through atomicfile.
func writeBytes(path string, b []byte) error {
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// syncDir makes dir's entries durable (a removal), as atomicfile does
// after a rename; a failure only loses durability, never data.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
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
// model.safetensors, config.json and companion files (tokenizer,
// generation config, adapters), shards of a sharded export there now
// (model-*-of-*.safetensors), and the index of a sharded checkpoint with
// the shards it lists. A caller that must never overwrite an input (the
// trainer's -init, -data) checks them first.
func Touches(dir string) []string {
	out := []string{filepath.Join(dir, modelFile), filepath.Join(dir, configFile)}
	for _, f := range companions {
		out = append(out, filepath.Join(dir, f))
	}
	if m, err := filepath.Glob(filepath.Join(dir, "model-*-of-*.safetensors")); err == nil {
		sort.Strings(m)
		out = append(out, m...)
	}
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
