package hf

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// GPT2Config is the part of a GPT-2 config.json memfit reads.
type GPT2Config struct {
	ModelType  string  `json:"model_type"`
	Layers     int     `json:"n_layer"`
	Heads      int     `json:"n_head"`
	Dim        int     `json:"n_embd"`
	Positions  int     `json:"n_positions"`
	Vocab      int     `json:"vocab_size"`
	Eps        float64 `json:"layer_norm_epsilon"`
	Activation string  `json:"activation_function"`
}

// gpt2Name maps memfit's parameter names to GPT-2's, and says whether the
// weight is a Conv1D (stored transposed).
func gpt2Name(name string) (hfName string, conv bool) {
	switch name {
	case "embed.tokens.weight":
		return "wte.weight", false
	case "embed.positions.weight":
		return "wpe.weight", false
	case "final_norm.weight":
		return "ln_f.weight", false
	case "final_norm.bias":
		return "ln_f.bias", false
	}
	// blocks.N.<part>.<weight|bias>
	rest := strings.TrimPrefix(name, "blocks.")
	i := strings.IndexByte(rest, '.')
	n, part := rest[:i], rest[i+1:]
	repl := map[string]string{
		"ln1": "ln_1", "ln2": "ln_2", "attn.qkv": "attn.c_attn", "attn.proj": "attn.c_proj",
		"mlp.fc": "mlp.c_fc", "mlp.proj": "mlp.c_proj",
	}
	for m, h := range repl {
		if strings.HasPrefix(part, m+".") {
			kind := strings.TrimPrefix(part, m+".")
			return "h." + n + "." + h + "." + kind, kind == "weight" && !strings.HasPrefix(m, "ln")
		}
	}
	return "", false
}

var layerRE = regexp.MustCompile(`^(?:transformer\.)?h\.(\d+)\.`)

// ReadGPT2Config reads config.json of a checkpoint, or, without one, infers
// the shape from the tensors (heads: width/64, GPT-2's head size) and says
// so in the returned note.
func ReadGPT2Config(c *Checkpoint) (GPT2Config, string, error) {
	var cfg GPT2Config
	path := filepath.Join(c.Dir, "config.json")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &cfg); err != nil {
			return cfg, "", fmt.Errorf("hf: %s: %v", path, err)
		}
		if cfg.ModelType != "gpt2" {
			return cfg, "", fmt.Errorf("hf: %s: model_type %q: memfit imports gpt2", path, cfg.ModelType)
		}
		if cfg.Activation != "" && cfg.Activation != "gelu_new" && cfg.Activation != "gelu_pytorch_tanh" {
			return cfg, "", fmt.Errorf("hf: %s: activation_function %q: memfit's GPT uses the tanh GELU (gelu_new)", path, cfg.Activation)
		}
		if cfg.Eps != 0 && cfg.Eps != 1e-5 {
			return cfg, "", fmt.Errorf("hf: %s: layer_norm_epsilon %v: memfit's LayerNorm uses 1e-5", path, cfg.Eps)
		}
		return cfg, "", nil
	case !errors.Is(err, os.ErrNotExist):
		return cfg, "", fmt.Errorf("hf: %v", err)
	}
	wte, ok := lookup(c, "wte.weight")
	wpe, ok2 := lookup(c, "wpe.weight")
	if !ok || !ok2 || len(wte.Shape) != 2 || len(wpe.Shape) != 2 {
		return cfg, "", fmt.Errorf("hf: %s: no config.json, and no wte/wpe tensors to infer the shape from", c.Dir)
	}
	layers := 0
	for _, n := range c.Names() {
		if m := layerRE.FindStringSubmatch(n); m != nil {
			i, _ := strconv.Atoi(m[1])
			layers = max(layers, i+1)
		}
	}
	cfg = GPT2Config{ModelType: "gpt2", Layers: layers, Dim: wte.Shape[1], Heads: max(wte.Shape[1]/64, 1),
		Positions: wpe.Shape[0], Vocab: wte.Shape[0], Eps: 1e-5}
	note := fmt.Sprintf("hf: %s has no config.json; inferred from the tensors: %d layers, width %d, %d heads (width/64), context %d, vocabulary %d",
		c.Dir, cfg.Layers, cfg.Dim, cfg.Heads, cfg.Positions, cfg.Vocab)
	return cfg, note, nil
}

// lookup finds a GPT-2 tensor with or without the "transformer." prefix.
func lookup(c *Checkpoint, name string) (Tensor, bool) {
	if t, ok := c.Tensor("transformer." + name); ok {
		return t, true
	}
	return c.Tensor(name)
}

// LoadGPT2 builds a models.GPT on dev from a GPT-2 checkpoint (a directory
// or a .safetensors file) and returns it with a note when the shape was
// inferred. Parameters are F32 (16-bit tensors are widened exactly).
func LoadGPT2(dev device.Device, path string) (*models.GPT, string, error) {
	return LoadGPT2With(dev, path, GPT2Options{})
}

// Options are what training adds to an imported model: dropout, the seed
// of its masks, the head's chunking and the parameters' dtype (F32 when
// unset; BF16 rounds the weights).
type Options struct {
	Dropout       float64
	Seed          uint64
	HeadChunkRows int
	DType         device.DType
	// Defer returns the model with its parameters deferred
	// (tensor.Deferred): checked against the checkpoint now, read from
	// it only when a sharding places them (parallel.NewZeRO3, one block at a
	// time), so the whole model never exists on the device. The
	// checkpoint's files stay mapped until every parameter has been read
	// or released. Such a model runs only once sharded.
	Defer bool
}

// GPT2Options is the name Options had when GPT-2 was the only import.
type GPT2Options = Options

// LoadGPT2With is LoadGPT2 with options.
func LoadGPT2With(dev device.Device, path string, o GPT2Options) (*models.GPT, string, error) {
	c, err := Open(path)
	if err != nil {
		return nil, "", err
	}
	files := holdOpen(c)
	defer files.done()
	cfg, note, err := ReadGPT2Config(c)
	if err != nil {
		return nil, "", err
	}
	if cfg.Layers < 1 || cfg.Heads < 1 || cfg.Dim < 1 || cfg.Positions < 1 || cfg.Vocab < 1 || cfg.Dim%cfg.Heads != 0 {
		return nil, "", fmt.Errorf("hf: %s: config %+v does not describe a GPT-2", c.Dir, cfg)
	}
	g, err := models.NewGPT(dev, models.GPTConfig{Layers: cfg.Layers, Heads: cfg.Heads, Dim: cfg.Dim, Context: cfg.Positions, Vocab: cfg.Vocab,
		Dropout: o.Dropout, Seed: o.Seed, HeadChunkRows: o.HeadChunkRows, DType: o.DType, Defer: o.Defer})
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*models.GPT, string, error) {
		nn.Release(g)
		return nil, "", err
	}
	used := map[string]bool{}
	for _, p := range g.Parameters() {
		hn, conv := gpt2Name(p.Name())
		t, ok := lookup(c, hn)
		if !ok {
			return fail(fmt.Errorf("hf: %s: no tensor %s (or transformer.%s) for %s", c.Dir, hn, hn, p.Name()))
		}
		used[t.File+"\x00"+hn] = true
		if err := fill(p, t, hn, conv, files); err != nil {
			return fail(err)
		}
	}
	// The head is tied: a stored lm_head must be the token embedding.
	if head, ok := c.Tensor("lm_head.weight"); ok {
		wte, _ := lookup(c, "wte.weight")
		if head.DType != wte.DType || string(head.Data) != string(wte.Data) {
			return fail(fmt.Errorf("hf: %s: lm_head.weight differs from wte.weight: memfit's GPT-2 ties its head to the token embedding", head.File))
		}
	}
	return g, note, nil
}

// fill sets p from t, the checkpoint's tensor hn, stored transposed
// (in × out) when conv, widening 16-bit values exactly. A deferred p
// (Options.Defer) is checked now and read when it is flattened, files
// staying open until then.
func fill(p *tensor.Tensor, t Tensor, hn string, conv bool, files *openFiles) error {
	want := p.Shape()
	if conv {
		want = []int{want[1], want[0]}
	}
	if !equal(t.Shape, want) {
		return fmt.Errorf("hf: %s: tensor %s has shape %v; config.json says %v", t.File, hn, t.Shape, want)
	}
	switch t.DType {
	case "F32", "BF16", "F16":
	default:
		return fmt.Errorf("hf: %s: tensor %s: dtype %s (memfit reads F32, F16 and BF16)", t.File, hn, t.DType)
	}
	read := func() ([]float32, error) {
		vals, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("hf: %s: tensor %s: %v", t.File, hn, err)
		}
		if conv {
			vals = transpose(vals, want[0], want[1])
		}
		return vals, nil
	}
	if p.IsDeferred() {
		dev := p.Device()
		files.hold()
		return p.DeferFrom(func(v device.View) error {
			vals, err := read()
			if err != nil {
				return err
			}
			// As SetFloat32s: through an F32 copy, rounded by the
			// device's conversion when the parameter is 16-bit.
			src, err := tensor.FromFloat32(dev, vals, v.Shape, memory.Temporary)
			if err != nil {
				return err
			}
			defer src.Release()
			dev.Copy(v, src.View())
			return nil
		}, files.done)
	}
	vals, err := read()
	if err != nil {
		return err
	}
	if err := p.SetFloat32s(vals); err != nil {
		return fmt.Errorf("hf: %s: tensor %s: %v", t.File, hn, err)
	}
	return nil
}

// openFiles closes a checkpoint when the last of its holders is done:
// the loader, and each deferred parameter until it has been read.
type openFiles struct {
	c     *Checkpoint
	holds int
}

func holdOpen(c *Checkpoint) *openFiles { return &openFiles{c: c, holds: 1} }

func (f *openFiles) hold() { f.holds++ }

func (f *openFiles) done() {
	if f.holds--; f.holds == 0 {
		f.c.Close()
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// transpose turns a rows×cols row-major matrix into cols×rows.
func transpose(v []float32, rows, cols int) []float32 {
	out := make([]float32, len(v))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = v[r*cols+c]
		}
	}
	return out
}

// SaveGPT2 writes g in GPT-2's layout and names into dir: config.json and
// model.safetensors (F32; Conv1D weights transposed; the tied head not
// stored, as Hugging Face stores it), each through a temporary file and a
// rename. LoRA adapters are merged into the weights they adapt
// (nn.Export): the files hold a plain GPT-2 that computes what g does.
func SaveGPT2(g *models.GPT, dir string) error {
	c := g.Config
	cfg := map[string]any{
		"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
		"n_layer": c.Layers, "n_head": c.Heads, "n_embd": c.Dim, "n_positions": c.Context, "n_ctx": c.Context,
		"vocab_size": c.Vocab, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "tie_word_embeddings": true,
	}
	var params []savedTensor
	for _, p := range nn.Export(g) { // LoRA adapters merged
		hn, conv := gpt2Name(p.Name)
		params = append(params, savedTensor{name: "transformer." + hn, conv: conv, p: p})
	}
	return writeModel(dir, cfg, params)
}

// savedTensor is a parameter as a bare model holds it (nn.Export: LoRA
// adapters merged) under its Hugging Face name; conv: stored transposed
// (GPT-2's Conv1D).
type savedTensor struct {
	name string
	conv bool
	p    nn.Exported
}

// writeModel writes config.json (cfg) and model.safetensors (params in
// F32, sorted by name) into dir, each through a temporary file and a
// rename. One tensor at a time is converted: the export holds no second
// copy of the model.
func writeModel(dir string, cfg map[string]any, params []savedTensor) error {
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	type entry struct {
		DType   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt", "producer": "memfit"}}
	sort.Slice(params, func(i, j int) bool { return params[i].name < params[j].name })
	var off int64
	for _, p := range params {
		shape := append([]int(nil), p.p.Shape...)
		n := int64(4)
		for _, d := range shape {
			n *= int64(d)
		}
		if p.conv {
			shape[0], shape[1] = shape[1], shape[0]
		}
		header[p.name] = &entry{DType: "F32", Shape: shape, Offsets: [2]int64{off, off + n}}
		off += n
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hj)%8 != 0 {
		hj = append(hj, ' ')
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err = writeAtomic(filepath.Join(dir, "model.safetensors"), func(w io.Writer) error {
		if _, err := w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(hj)))); err != nil {
			return err
		}
		if _, err := w.Write(hj); err != nil {
			return err
		}
		for _, p := range params {
			vals, err := p.p.Float32s()
			if err != nil {
				return fmt.Errorf("%s: %w", p.p.Name, err)
			}
			if p.conv {
				sh := p.p.Shape
				vals = transpose(vals, sh[0], sh[1])
			}
			b := make([]byte, 4*len(vals))
			for i, v := range vals {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "config.json"), func(w io.Writer) error {
		_, err := w.Write(append(cj, '\n'))
		return err
	})
}

// writeAtomic writes through fill into a temporary file, syncs it and
// renames it to path, so that path holds the old contents or the new,
// never a part.
func writeAtomic(path string, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	bw := bufio.NewWriterSize(f, 1<<20)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
