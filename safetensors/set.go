package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memfit/memfit/internal/regularfile"
)

// IndexName is the file that lists a sharded checkpoint's tensors.
const IndexName = "model.safetensors.index.json"

// MaxIndex bounds an index file (a few megabytes list the largest models'
// tensors), so that reading a corrupt or hostile one stays small.
const MaxIndex = 64 << 20

// Index is a sharded checkpoint's index, model.safetensors.index.json:
// which file (a shard beside the index) holds each tensor.
type Index struct {
	Path      string            // the index file
	WeightMap map[string]string // tensor name -> shard file name
}

// ReadIndex reads and checks an index: a JSON object whose weight_map
// lists at least one tensor, each in a shard named by a plain file name in
// the index's directory (a path that leaves it, a subdirectory or an
// absolute path is an error, so an index cannot make a reader open or an
// export remove anything else). Errors name the index file.
func ReadIndex(path string) (*Index, error) {
	b, err := regularfile.Read(path, MaxIndex)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %v", err)
	}
	var raw struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %v", path, err)
	}
	if len(raw.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: %s: weight_map lists no tensors", path)
	}
	for name, shard := range raw.WeightMap {
		if !isLocalName(shard) {
			return nil, fmt.Errorf("safetensors: %s: tensor %s is in %q: want the name of a file beside the index", path, name, shard)
		}
	}
	return &Index{Path: path, WeightMap: raw.WeightMap}, nil
}

// isLocalName says whether name is a plain file name: no directory part,
// not "." or "..".
func isLocalName(name string) bool {
	return name != "" && filepath.IsLocal(name) && !strings.ContainsAny(name, `/\`) && name != "."
}

// Shards lists the index's shard files (paths beside the index), sorted.
func (x *Index) Shards() []string {
	var out []string
	for _, s := range slices.Sorted(maps.Values(x.WeightMap)) {
		if p := filepath.Join(filepath.Dir(x.Path), s); len(out) == 0 || out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	return out
}

// Set is the tensors of one or more files read as one: a single file, or
// the shards an index lists. No tensor may be in two of its files.
type Set struct {
	files   []*File
	tensors map[string]Tensor
}

// OpenFiles opens and checks each file (see Open) and gathers their
// tensors, refusing a tensor that two files hold.
func OpenFiles(paths ...string) (*Set, error) {
	s := &Set{tensors: map[string]Tensor{}}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		for _, n := range f.Names() {
			if prev, dup := s.tensors[n]; dup {
				s.Close()
				return nil, fmt.Errorf("safetensors: tensor %s is in both %s and %s", n, prev.File, p)
			}
			s.tensors[n], _ = f.Tensor(n)
		}
	}
	return s, nil
}

// OpenIndex opens the shards the index at path lists and checks them
// against it: every tensor it lists must be in the shard it names, and
// every tensor of a shard must be listed there, so that the index and the
// files never disagree about which bytes a tensor is.
func OpenIndex(path string) (*Set, error) {
	x, err := ReadIndex(path)
	if err != nil {
		return nil, err
	}
	s, err := OpenFiles(x.Shards()...)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) (*Set, error) {
		s.Close()
		return nil, fmt.Errorf("safetensors: %s: "+format, append([]any{path}, args...)...)
	}
	for _, n := range slices.Sorted(maps.Keys(x.WeightMap)) {
		want := filepath.Join(filepath.Dir(path), x.WeightMap[n])
		t, ok := s.tensors[n]
		switch {
		case !ok:
			return fail("tensor %s is in %s, which does not hold it", n, want)
		case t.File != want:
			return fail("tensor %s is in %s, but %s holds it", n, want, t.File)
		}
	}
	for _, n := range s.Names() {
		if _, ok := x.WeightMap[n]; !ok {
			t := s.tensors[n]
			return fail("%s holds tensor %s, which the index does not list", t.File, n)
		}
	}
	return s, nil
}

// Tensor returns the tensor called name, from whichever file holds it.
func (s *Set) Tensor(name string) (Tensor, bool) {
	t, ok := s.tensors[name]
	return t, ok
}

// Names lists the tensors of every file, sorted.
func (s *Set) Names() []string {
	return slices.Sorted(maps.Keys(s.tensors))
}

// Files lists the set's files, in the order they were opened.
func (s *Set) Files() []*File { return s.files }

// Close unmaps every file: the tensors' Data is invalid afterwards.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		errs = append(errs, f.Close())
	}
	s.files, s.tensors = nil, nil
	return errors.Join(errs...)
}
