package hf

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
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
// so in the returned note. Either way every value is bounded (MaxLayers
// and the other bounds), an error naming the file and the key otherwise,
// so that Params is exact and small enough to check before a model is
// built.
func ReadGPT2Config(c *Checkpoint) (GPT2Config, string, error) {
	var cfg GPT2Config
	b, path, err := readConfig(c.Dir)
	if err != nil {
		return cfg, "", err
	}
	if b != nil {
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
		return cfg, "", cfg.check(path)
	}
	wte, ok := lookup(c, "wte.weight")
	wpe, ok2 := lookup(c, "wpe.weight")
	if !ok || !ok2 || len(wte.Shape) != 2 || len(wpe.Shape) != 2 {
		return cfg, "", fmt.Errorf("hf: %s: no config.json, and no wte/wpe tensors to infer the shape from", c.Dir)
	}
	layers, err := countLayers(c, layerRE)
	if err != nil {
		return cfg, "", err
	}
	cfg = GPT2Config{ModelType: "gpt2", Layers: layers, Dim: wte.Shape[1], Heads: max(wte.Shape[1]/64, 1),
		Positions: wpe.Shape[0], Vocab: wte.Shape[0], Eps: 1e-5}
	if err := cfg.check(c.Dir + " (no config.json; inferred from the tensors)"); err != nil {
		return cfg, "", err
	}
	note := fmt.Sprintf("hf: %s has no config.json; inferred from the tensors: %d layers, width %d, %d heads (width/64), context %d, vocabulary %d",
		c.Dir, cfg.Layers, cfg.Dim, cfg.Heads, cfg.Positions, cfg.Vocab)
	return cfg, note, nil
}

// countLayers infers a layer count from the tensor names re matches (its
// first group the layer's index): one more than the largest index. An
// index past MaxLayers is an error naming the tensor.
func countLayers(c *Checkpoint, re *regexp.Regexp) (int, error) {
	layers := 0
	for _, n := range c.Names() {
		if m := re.FindStringSubmatch(n); m != nil {
			i, err := strconv.Atoi(m[1])
			if err != nil || i >= MaxLayers {
				t, _ := c.Tensor(n)
				return 0, fmt.Errorf("hf: %s: tensor %s: layer %s is past the bound of %d layers", t.File, n, m[1], MaxLayers)
			}
			layers = max(layers, i+1)
		}
	}
	return layers, nil
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
	// Quantize, when set, is asked about the weight of each Linear layer
	// by the weight's name ("blocks.0.attn.q.weight"; an untied LM head,
	// Llama's "head.weight", is one) and names the quantized dtype to
	// store it in, device.NF4 or device.Int8, or device.Invalid to keep
	// it in DType. A quantized weight is made from its host values as it
	// is read (or, NF4 from a checkpoint in bitsandbytes' 4-bit layout,
	// from its codes as stored) and is frozen: the import holds the
	// quantized model plus one tensor, never the model in a float dtype
	// (see quant.go). Not with Defer.
	Quantize func(name string) device.DType
	// Park, with Quantize, takes each quantized weight of the model's
	// blocks as soon as it is made (a streamed base moves it to host
	// memory: the device never holds the base whole).
	Park func(*tensor.Tensor) error
}

// check refuses options that do not go together.
func (o Options) check() error {
	if o.Defer && o.Quantize != nil {
		return fmt.Errorf("hf: Options.Quantize with Defer: a deferred model is drawn as a sharding places it, in DType")
	}
	return nil
}

// GPT2Options is the name Options had when GPT-2 was the only import.
type GPT2Options = Options

// LoadGPT2With is LoadGPT2 with options. The checkpoint is checked
// against the model its config describes before that model is built (see
// probe): a missing tensor, a shape or dtype config.json contradicts, or
// a tensor memfit would drop (a layer past n_layer, say) is an error
// naming the tensor, and nothing the size of the model is allocated for
// a checkpoint that cannot fill it.
func LoadGPT2With(dev device.Device, path string, o GPT2Options) (*models.GPT, string, error) {
	if err := o.check(); err != nil {
		return nil, "", err
	}
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
	mc := models.GPTConfig{Layers: cfg.Layers, Heads: cfg.Heads, Dim: cfg.Dim, Context: cfg.Positions, Vocab: cfg.Vocab}
	if !c.Weights() {
		mc.Dropout, mc.Seed, mc.HeadChunkRows, mc.DType = o.Dropout, o.Seed, o.HeadChunkRows, o.DType
		g, err := shapeOnly(c, dev, o, func(defer_ bool) (*models.GPT, error) {
			mc.Defer = defer_
			return models.NewGPT(dev, mc)
		})
		return g, note, err
	}
	bind := func(g *models.GPT) ([]binding, error) { return bindGPT2(c, g.Parameters(), cfg.Layers) }
	if err := probe(c, func(dev device.Device) (*models.GPT, error) { return models.NewGPT(dev, mc) }, bind); err != nil {
		return nil, "", err
	}
	mc.Dropout, mc.Seed, mc.HeadChunkRows, mc.DType, mc.Defer = o.Dropout, o.Seed, o.HeadChunkRows, o.DType, o.Defer || o.Quantize != nil
	g, err := models.NewGPT(dev, mc)
	if err != nil {
		return nil, "", err
	}
	if err := fillAll(g, bind, files, o.Quantize, o.Park); err != nil {
		return nil, "", err
	}
	return g, note, nil
}

// bindGPT2 pairs GPT-2 parameters with their tensors (with or without the
// "transformer." prefix) and checks what the checkpoint holds besides: a
// stored lm_head.weight must be the token embedding (the head is tied),
// the causal masks attn.bias and attn.masked_bias are buffers memfit
// computes, and anything else is an error, not a tensor silently dropped.
func bindGPT2(c *Checkpoint, params []*tensor.Tensor, layers int) ([]binding, error) {
	bs, used, err := bindParams(c, params, func(name string) (string, bool, bool) {
		hn, conv := gpt2Name(name)
		if _, ok := c.Tensor("transformer." + hn); ok {
			return "transformer." + hn, conv, true
		}
		_, ok := c.Tensor(hn)
		return hn, conv, ok
	}, func(name string) string {
		hn, _ := gpt2Name(name)
		return fmt.Sprintf("%s (or transformer.%s)", hn, hn)
	})
	if err != nil {
		return nil, err
	}
	if head, ok := c.Tensor("lm_head.weight"); ok {
		wte, _ := lookup(c, "wte.weight")
		if head.DType != wte.DType || string(head.Data) != string(wte.Data) {
			return nil, fmt.Errorf("hf: %s: lm_head.weight differs from wte.weight: memfit's GPT-2 ties its head to the token embedding", head.File)
		}
		used["lm_head.weight"] = true
	}
	for _, n := range c.Names() {
		if used[n] || strings.HasSuffix(n, ".attn.bias") || strings.HasSuffix(n, ".attn.masked_bias") {
			continue
		}
		t, _ := c.Tensor(n)
		why := ""
		if m := layerRE.FindStringSubmatch(n); m != nil {
			why = fmt.Sprintf(" (of layer %s; n_layer is %d)", m[1], layers)
		}
		return nil, fmt.Errorf("hf: %s: tensor %s is not part of a GPT-2 as config.json describes it%s", t.File, n, why)
	}
	return bs, nil
}

// binding is a parameter and the checkpoint tensor it is read from.
type binding struct {
	p    *tensor.Tensor
	t    Tensor
	name string // the tensor's name in the checkpoint
	conv bool   // stored transposed (in × out)
	// nf4 is the weight as bitsandbytes stores it 4-bit (t its packed
	// codes), nil for a float tensor.
	nf4 *device.NF4Parts
}

// bindParams pairs each parameter with the tensor find names for it
// (conv: stored transposed; ok: present), checking its shape and dtype;
// want says what was looked for when it is absent. It returns the
// bindings and the set of tensor names used.
func bindParams(c *Checkpoint, params []*tensor.Tensor, find func(param string) (name string, conv, ok bool), want func(param string) string) ([]binding, map[string]bool, error) {
	used := map[string]bool{}
	bs := make([]binding, 0, len(params))
	for _, p := range params {
		hn, conv, ok := find(p.Name())
		if !ok {
			return nil, nil, fmt.Errorf("hf: %s: no tensor %s for %s", c.Dir, want(p.Name()), p.Name())
		}
		t, _ := c.Tensor(hn)
		bshape, parts, names, bnb, err := bnbWeight(c, hn)
		switch {
		case err != nil:
			return nil, nil, err
		case bnb && conv:
			// transformers transposes a Conv1D weight before it
			// quantizes it; memfit reads the 4-bit layout of Linear
			// layers (Llama's) only.
			return nil, nil, fmt.Errorf("hf: %s: tensor %s is a 4-bit Conv1D weight; memfit reads bitsandbytes' layout for Llama checkpoints", t.File, hn)
		case bnb:
			if !slices.Equal(bshape, p.Shape()) {
				return nil, nil, fmt.Errorf("hf: %s: tensor %s has shape %v (its quant_state); config.json says %v", t.File, hn, bshape, p.Shape())
			}
			for _, n := range names {
				used[n] = true
			}
			bs = append(bs, binding{p: p, t: t, name: hn, nf4: &parts})
			continue
		}
		shape := p.Shape()
		if conv {
			shape = []int{shape[1], shape[0]}
		}
		if !slices.Equal(t.Shape, shape) {
			return nil, nil, fmt.Errorf("hf: %s: tensor %s has shape %v; config.json says %v", t.File, hn, t.Shape, shape)
		}
		switch t.DType {
		case safetensors.F32, safetensors.BF16, safetensors.F16:
		default:
			return nil, nil, fmt.Errorf("hf: %s: tensor %s: dtype %s (memfit reads F32, F16 and BF16)", t.File, hn, t.DType)
		}
		used[hn] = true
		bs = append(bs, binding{p: p, t: t, name: hn, conv: conv})
	}
	return bs, used, nil
}

// probe builds the model a config describes on the meta device, which
// holds no memory, and binds its parameters to the checkpoint: whatever
// is wrong is found before the model is built for real. Each parameter
// is then read from a tensor of its own shape, so the model is no larger
// than the checkpoint's tensors (twice, for 16-bit ones widened to F32),
// whatever config.json claims; building the probe costs no more than the
// bounds allow (MaxLayers).
func probe[M nn.Module](c *Checkpoint, build func(device.Device) (M, error), bind func(M) ([]binding, error)) error {
	m, err := build(meta.New(0))
	if err != nil {
		return fmt.Errorf("hf: %s: %w", filepath.Join(c.Dir, configFile), err)
	}
	defer nn.Release(m)
	_, err = bind(m)
	return err
}

// fillAll binds m's parameters (bind) and fills each from its tensor,
// releasing m if anything fails. With quantize (Options.Quantize), m's
// parameters are deferred and get their memory one at a time
// (materializeAll).
func fillAll[M nn.Module](m M, bind func(M) ([]binding, error), files *openFiles, quantize func(string) device.DType, park func(*tensor.Tensor) error) error {
	bs, err := bind(m)
	if err == nil && quantize != nil {
		err = materializeAll(m, bs, files, quantize, park)
	}
	for i := 0; err == nil && quantize == nil && i < len(bs); i++ {
		err = fill(bs[i], files)
	}
	if err != nil {
		nn.Release(m)
	}
	return err
}

// fill sets b.p from its tensor, stored transposed (in × out) when
// b.conv, widening 16-bit values exactly. A deferred parameter
// (Options.Defer) is read when it is flattened, files staying open until
// then.
func fill(b binding, files *openFiles) error {
	p, t, hn := b.p, b.t, b.name
	read := b.values
	if p.IsDeferred() {
		dev := p.Device()
		files.hold()
		return p.DeferFrom(func(v device.View) error {
			if b.streams(v) {
				return b.copyChunks(dev, v)
			}
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
	if v := p.View(); b.streams(v) {
		return b.copyChunks(p.Device(), v)
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

// fillChunk is how many elements copyChunks widens at a time: 16 MiB of
// F32 on the host and as a temporary on the device.
var fillChunk = 1 << 22 // a variable for the tests

// streams reports whether b's tensor can be copied into v a chunk at a
// time: stored as laid out (not transposed, not 4-bit) into dense
// storage. Then no whole F32 copy of it exists on the host or the device
// (Llama 3 8B's embedding would be 2.1 GB of each): the peak of a load
// is the model and one chunk.
func (b binding) streams(v device.View) bool {
	return !b.conv && b.nf4 == nil && v.Contiguous() && int64(v.Len()) == b.t.Len() && b.t.Len() > int64(fillChunk)
}

// copyChunks copies b's tensor into v chunk by chunk, each widened to F32
// exactly and rounded to v's dtype by the device's conversion, as
// SetFloat32s does for the whole.
func (b binding) copyChunks(dev device.Device, v device.View) error {
	t := b.t
	size := t.DType.Size()
	n := v.Len()
	for at := 0; at < n; at += fillChunk {
		m := min(fillChunk, n-at)
		vals, err := safetensors.Float32s(t.DType, t.Data[at*size:(at+m)*size])
		if err == nil {
			err = finite(vals, at)
		}
		if err != nil {
			return fmt.Errorf("hf: %s: tensor %s: %v", t.File, b.name, err)
		}
		src, err := tensor.FromFloat32(dev, vals, []int{m}, memory.Temporary)
		if err != nil {
			return fmt.Errorf("hf: %s: tensor %s: %w", t.File, b.name, err)
		}
		dev.Copy(device.View{Buf: v.Buf, DType: v.DType, Offset: v.Offset + at, Shape: []int{m}, Strides: []int{1}}, src.View())
		src.Release()
	}
	return nil
}

// values reads b's tensor as F32 values in the parameter's layout: 16-bit
// values widened exactly, a Conv1D weight transposed, a 4-bit one
// dequantized.
func (b binding) values() ([]float32, error) {
	t := b.t
	if b.nf4 != nil {
		vals := make([]float32, b.p.Len())
		for i := range vals {
			vals[i] = b.nf4.Value(i)
		}
		return vals, nil
	}
	vals, err := t.Float32s()
	if err == nil {
		err = finite(vals, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("hf: %s: tensor %s: %v", t.File, b.name, err)
	}
	if b.conv {
		vals = transpose(vals, t.Shape[0], t.Shape[1])
	}
	return vals, nil
}

// finite returns an error naming the first element of v (numbered from
// at) that is not a finite number: a model that would train on it
// computes NaN from the first step (and would save and export it).
func finite(v []float32, at int) error {
	for i, x := range v {
		if x-x != 0 { // ±Inf and NaN
			return fmt.Errorf("element %d is %v: the weights are not finite", at+i, x)
		}
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
	return saveGPT2(g, dir, safetensors.F32, SaveOptions{})
}

// saveGPT2 is SaveGPT2 writing tensors of dtype dt (F32 or BF16) and o's
// companion files.
func saveGPT2(g *models.GPT, dir string, dt safetensors.DType, o SaveOptions) error {
	c := g.Config
	cfg := map[string]any{
		"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
		"n_layer": c.Layers, "n_head": c.Heads, "n_embd": c.Dim, "n_positions": c.Context, "n_ctx": c.Context,
		"vocab_size": c.Vocab, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "tie_word_embeddings": true,
	}
	if dt != safetensors.F32 {
		cfg["torch_dtype"] = torchDType(dt)
	}
	var params []savedTensor
	for _, p := range nn.Export(g) { // LoRA adapters merged
		hn, conv := gpt2Name(p.Name)
		params = append(params, savedTensor{name: "transformer." + hn, conv: conv, p: p})
	}
	files, err := o.companionFiles(cfg)
	if err != nil {
		return err
	}
	return writeModel(dir, cfg, params, dt, files, o.ShardBytes)
}
