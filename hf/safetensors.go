package hf

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// Tensor is one tensor of a checkpoint: its dtype as safetensors names it
// (F32, F16, BF16), its shape, and its bytes (little-endian), which alias
// the file's memory map until the checkpoint is closed.
type Tensor struct {
	DType string
	Shape []int
	Data  []byte
	File  string // the file it comes from
}

// Float32s converts the tensor's elements to float32.
func (t Tensor) Float32s() ([]float32, error) {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	out := make([]float32, n)
	switch t.DType {
	case "F32":
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case "BF16":
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(t.Data[2*i:])) << 16)
		}
	case "F16":
		for i := range out {
			out[i] = f16ToF32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	default:
		return nil, fmt.Errorf("dtype %s (memfit reads F32, F16 and BF16)", t.DType)
	}
	return out, nil
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

var dtypeSize = map[string]int{"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1, "I8": 1}

// Checkpoint is a model's tensors across one or more safetensors files.
type Checkpoint struct {
	Dir     string
	tensors map[string]Tensor
	maps    []*mapping
}

// Open opens a checkpoint: a .safetensors file, or a directory holding
// model.safetensors or model.safetensors.index.json and its shards.
func Open(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: path, tensors: map[string]Tensor{}}
	var files []string
	switch {
	case !st.IsDir():
		c.Dir = filepath.Dir(path)
		files = []string{path}
	default:
		index := filepath.Join(path, "model.safetensors.index.json")
		if b, err := os.ReadFile(index); err == nil {
			var idx struct {
				WeightMap map[string]string `json:"weight_map"`
			}
			if err := json.Unmarshal(b, &idx); err != nil {
				return nil, fmt.Errorf("hf: %s: %v", index, err)
			}
			seen := map[string]bool{}
			for _, f := range idx.WeightMap {
				if !seen[f] {
					seen[f] = true
					files = append(files, filepath.Join(path, filepath.Base(f)))
				}
			}
			sort.Strings(files)
		} else {
			files = []string{filepath.Join(path, "model.safetensors")}
		}
	}
	for _, f := range files {
		if err := c.add(f); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// add maps one safetensors file and indexes its tensors, checking that the
// header and the data agree.
func (c *Checkpoint) add(path string) error {
	m, err := mapFile(path)
	if err != nil {
		return fmt.Errorf("hf: %v", err)
	}
	c.maps = append(c.maps, m)
	b := m.data
	if len(b) < 8 {
		return fmt.Errorf("hf: %s: %d bytes: too short for a safetensors header", path, len(b))
	}
	hlen := binary.LittleEndian.Uint64(b)
	if hlen > 100<<20 || hlen > uint64(len(b)-8) {
		return fmt.Errorf("hf: %s: header length %d does not fit a file of %d bytes", path, hlen, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+hlen], &raw); err != nil {
		return fmt.Errorf("hf: %s: header is not JSON: %v", path, err)
	}
	data := b[8+hlen:]
	type span struct {
		lo, hi int64
		name   string
	}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			continue
		}
		var e struct {
			DType   string   `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return fmt.Errorf("hf: %s: tensor %s: %v", path, name, err)
		}
		size, ok := dtypeSize[e.DType]
		if !ok {
			return fmt.Errorf("hf: %s: tensor %s: unknown dtype %q", path, name, e.DType)
		}
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return fmt.Errorf("hf: %s: tensor %s: shape %v", path, name, e.Shape)
			}
			n *= int64(d)
		}
		if e.Offsets[0] < 0 || e.Offsets[1]-e.Offsets[0] != n*int64(size) || e.Offsets[1] > int64(len(data)) {
			return fmt.Errorf("hf: %s: tensor %s: shape %v of %s and byte range %v do not fit %d data bytes", path, name, e.Shape, e.DType, e.Offsets, len(data))
		}
		if _, dup := c.tensors[name]; dup {
			return fmt.Errorf("hf: %s: tensor %s is also in another shard", path, name)
		}
		c.tensors[name] = Tensor{DType: e.DType, Shape: e.Shape, Data: data[e.Offsets[0]:e.Offsets[1]], File: path}
		spans = append(spans, span{e.Offsets[0], e.Offsets[1], name})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			return fmt.Errorf("hf: %s: tensors %s and %s overlap", path, spans[i-1].name, spans[i].name)
		}
	}
	return nil
}

// Tensor returns a tensor by name.
func (c *Checkpoint) Tensor(name string) (Tensor, bool) {
	t, ok := c.tensors[name]
	return t, ok
}

// Names lists the tensors, sorted.
func (c *Checkpoint) Names() []string {
	out := make([]string, 0, len(c.tensors))
	for n := range c.tensors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Close unmaps the files: the tensors' Data is invalid afterwards.
func (c *Checkpoint) Close() error {
	var first error
	for _, m := range c.maps {
		if err := m.close(); err != nil && first == nil {
			first = err
		}
	}
	c.maps, c.tensors = nil, nil
	return first
}
