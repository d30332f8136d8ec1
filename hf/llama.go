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
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tensor"
)

// LlamaConfig is the part of a Llama config.json memfit reads.
type LlamaConfig struct {
	Architectures []string     `json:"architectures"`
	ModelType     string       `json:"model_type"`
	Dim           int          `json:"hidden_size"`
	Hidden        int          `json:"intermediate_size"`
	Layers        int          `json:"num_hidden_layers"`
	Heads         int          `json:"num_attention_heads"`
	KVHeads       int          `json:"num_key_value_heads"` // absent: Heads (Llama 1 and 2 7B)
	HeadDim       int          `json:"head_dim"`            // absent: hidden_size / num_attention_heads
	Eps           float64      `json:"rms_norm_eps"`
	RopeTheta     float64      `json:"rope_theta"`
	RopeScaling   *RopeScaling `json:"rope_scaling"`
	Tied          bool         `json:"tie_word_embeddings"` // Hugging Face's default for Llama: false
	Vocab         int          `json:"vocab_size"`
	Positions     int          `json:"max_position_embeddings"`
	Activation    string       `json:"hidden_act"`
	AttentionBias bool         `json:"attention_bias"`
	MLPBias       bool         `json:"mlp_bias"`
}

// RopeScaling is config.json's rope_scaling.
type RopeScaling struct {
	RopeType       string  `json:"rope_type"`
	Type           string  `json:"type"` // the older key for rope_type
	Factor         float64 `json:"factor"`
	LowFreqFactor  float64 `json:"low_freq_factor"`
	HighFreqFactor float64 `json:"high_freq_factor"`
	Original       int     `json:"original_max_position_embeddings"`
}

// Model is the models.LlamaConfig c describes.
func (c LlamaConfig) Model() models.LlamaConfig {
	m := models.LlamaConfig{Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads, Dim: c.Dim, Hidden: c.Hidden, Context: c.Positions,
		Vocab: c.Vocab, RopeTheta: c.RopeTheta, NormEps: c.Eps, TiedHead: c.Tied}
	if s := c.RopeScaling; s != nil {
		m.RopeScaling = nn.RopeScaling{Type: s.kind(), Factor: s.Factor, LowFreqFactor: s.LowFreqFactor, HighFreqFactor: s.HighFreqFactor, OriginalContext: s.Original}
	}
	return m
}

func (s *RopeScaling) kind() string {
	if s.RopeType != "" {
		return s.RopeType
	}
	return s.Type
}

// Architecture names the family of a checkpoint's model: "gpt2" or
// "llama". config.json decides when present (model_type, else
// architectures); without it, the tensor names do. Anything else is an
// error naming the file.
func Architecture(c *Checkpoint) (string, error) {
	b, path, err := readConfig(c.Dir)
	switch {
	case err != nil:
		return "", err
	case b != nil:
		var cfg struct {
			ModelType     string   `json:"model_type"`
			Architectures []string `json:"architectures"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return "", fmt.Errorf("hf: %s: %v", path, err)
		}
		switch {
		case cfg.ModelType == "gpt2", cfg.ModelType == "" && slices.Contains(cfg.Architectures, "GPT2LMHeadModel"):
			return "gpt2", nil
		case cfg.ModelType == "llama", cfg.ModelType == "" && slices.Contains(cfg.Architectures, "LlamaForCausalLM"):
			return "llama", nil
		}
		return "", fmt.Errorf("hf: %s: model_type %q, architectures %q: memfit imports gpt2 (GPT2LMHeadModel) and llama (LlamaForCausalLM)", path, cfg.ModelType, cfg.Architectures)
	}
	if _, ok := c.Tensor("model.embed_tokens.weight"); ok {
		return "llama", nil
	}
	if _, ok := lookup(c, "wte.weight"); ok {
		return "gpt2", nil
	}
	return "", fmt.Errorf("hf: %s: no config.json, and neither GPT-2's wte.weight nor Llama's model.embed_tokens.weight: not a model memfit imports", c.Dir)
}

var llamaLayerRE = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

// ReadLlamaConfig reads config.json of a Llama checkpoint and checks that
// memfit's Llama computes what it describes (SiLU, no biases, heads of
// hidden_size/num_attention_heads, a rope scaling it knows); keys it
// lacks take transformers' LlamaConfig defaults (num_key_value_heads:
// num_attention_heads, rms_norm_eps 1e-6, rope_theta 10000,
// max_position_embeddings 2048, tie_word_embeddings false). Without
// config.json it infers the shape from the tensors and says so in the
// returned note: heads of 64 (or, for narrower widths, the largest power
// of two that divides both the width and k_proj's rows), context 2048,
// rope_theta 10000, ε 1e-5, a tied head when lm_head.weight is absent.
func ReadLlamaConfig(c *Checkpoint) (LlamaConfig, string, error) {
	var cfg LlamaConfig
	b, path, err := readConfig(c.Dir)
	switch {
	case err != nil:
		return cfg, "", err
	case b != nil:
		if err := json.Unmarshal(b, &cfg); err != nil {
			return cfg, "", fmt.Errorf("hf: %s: %v", path, err)
		}
		if cfg.ModelType != "llama" && !(cfg.ModelType == "" && slices.Contains(cfg.Architectures, "LlamaForCausalLM")) {
			return cfg, "", fmt.Errorf("hf: %s: model_type %q: not a Llama (LlamaForCausalLM)", path, cfg.ModelType)
		}
		bad := func(key string, v any, why string) (LlamaConfig, string, error) {
			return cfg, "", fmt.Errorf("hf: %s: %s %v: %s", path, key, v, why)
		}
		switch {
		case cfg.Activation != "" && cfg.Activation != "silu":
			return bad("hidden_act", strconv.Quote(cfg.Activation), "memfit's Llama uses silu")
		case cfg.AttentionBias:
			return bad("attention_bias", true, "memfit's Llama has no attention biases")
		case cfg.MLPBias:
			return bad("mlp_bias", true, "memfit's Llama has no MLP biases")
		case cfg.Heads > 0 && cfg.HeadDim != 0 && cfg.HeadDim*cfg.Heads != cfg.Dim:
			return bad("head_dim", cfg.HeadDim, fmt.Sprintf("memfit's Llama takes heads of hidden_size/num_attention_heads = %d", cfg.Dim/cfg.Heads))
		}
		if s := cfg.RopeScaling; s != nil {
			switch s.kind() {
			case "", "default", "llama3":
			default:
				return bad("rope_scaling", strconv.Quote(s.kind()), "memfit knows rope_type llama3")
			}
		}
		if cfg.KVHeads == 0 {
			cfg.KVHeads = cfg.Heads
		}
		if cfg.Eps == 0 {
			cfg.Eps = 1e-6 // Hugging Face's LlamaConfig default
		}
		if cfg.RopeTheta == 0 {
			cfg.RopeTheta = 10000
		}
		if cfg.Positions == 0 {
			cfg.Positions = 2048
		}
		return cfg, "", cfg.check(path)
	}
	emb, ok := c.Tensor("model.embed_tokens.weight")
	k, ok2 := c.Tensor("model.layers.0.self_attn.k_proj.weight")
	up, ok3 := c.Tensor("model.layers.0.mlp.up_proj.weight")
	if !ok || !ok2 || !ok3 || len(emb.Shape) != 2 || len(k.Shape) != 2 || len(up.Shape) != 2 {
		return cfg, "", fmt.Errorf("hf: %s: no config.json, and no embed_tokens, layer 0 k_proj and up_proj tensors to infer the shape from", c.Dir)
	}
	if isBnb(c, "model.layers.0.self_attn.k_proj.weight") || isBnb(c, "model.layers.0.mlp.up_proj.weight") {
		// The packed codes' shape is not the weight's.
		return cfg, "", fmt.Errorf("hf: %s: no config.json, and the weights are 4-bit (bitsandbytes): the shape is not inferred from packed codes", c.Dir)
	}
	layers, err := countLayers(c, llamaLayerRE)
	if err != nil {
		return cfg, "", err
	}
	dim, kvRows := emb.Shape[1], k.Shape[0]
	hd := 64
	for dim%hd != 0 || kvRows%hd != 0 {
		hd /= 2
	}
	_, hasHead := c.Tensor("lm_head.weight")
	cfg = LlamaConfig{ModelType: "llama", Dim: dim, Hidden: up.Shape[0], Layers: layers, Heads: dim / hd, KVHeads: kvRows / hd,
		Eps: 1e-5, RopeTheta: 10000, Tied: !hasHead, Vocab: emb.Shape[0], Positions: 2048}
	if err := cfg.check(c.Dir + " (no config.json; inferred from the tensors)"); err != nil {
		return cfg, "", err
	}
	note := fmt.Sprintf("hf: %s has no config.json; inferred from the tensors: %d layers, width %d, %d heads and %d key/value heads (heads of %d), MLP width %d, vocabulary %d, %s head; assumed context 2048, rope_theta 10000, rms_norm_eps 1e-5",
		c.Dir, cfg.Layers, cfg.Dim, cfg.Heads, cfg.KVHeads, hd, cfg.Hidden, cfg.Vocab, map[bool]string{true: "tied", false: "untied"}[cfg.Tied])
	return cfg, note, nil
}

// llamaName maps memfit's parameter names to Llama's.
func llamaName(name string) string {
	switch name {
	case "embed.tokens.weight":
		return "model.embed_tokens.weight"
	case "final_norm.weight":
		return "model.norm.weight"
	case "head.weight":
		return "lm_head.weight"
	}
	// blocks.N.<part>.weight
	rest := strings.TrimPrefix(name, "blocks.")
	i := strings.IndexByte(rest, '.')
	n, part := rest[:i], strings.TrimSuffix(rest[i+1:], ".weight")
	hfPart := map[string]string{
		"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
		"attn.q": "self_attn.q_proj", "attn.k": "self_attn.k_proj", "attn.v": "self_attn.v_proj", "attn.o": "self_attn.o_proj",
		"mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj",
	}[part]
	return "model.layers." + n + "." + hfPart + ".weight"
}

// LoadLlama builds a models.Llama on dev from a Llama checkpoint (a
// directory or a .safetensors file) and returns it with a note when the
// shape was inferred. Parameters are F32 (16-bit tensors are widened
// exactly).
func LoadLlama(dev device.Device, path string) (*models.Llama, string, error) {
	return LoadLlamaWith(dev, path, Options{})
}

// LoadLlamaWith is LoadLlama with options (dropout applies to the
// attention probabilities). Names are Hugging Face's; q_proj and k_proj
// are used as stored, since memfit's rotary embeddings pair elements as
// Hugging Face's rotate_half does. A stored lm_head.weight of a tied
// model must equal the embedding; the rotary_emb.inv_freq buffers of old
// checkpoints are ignored, and any other tensor memfit would not use is
// an error naming it.
func LoadLlamaWith(dev device.Device, path string, o Options) (*models.Llama, string, error) {
	if err := o.check(); err != nil {
		return nil, "", err
	}
	c, err := Open(path)
	if err != nil {
		return nil, "", err
	}
	files := holdOpen(c)
	defer files.done()
	cfg, note, err := ReadLlamaConfig(c)
	if err != nil {
		return nil, "", err
	}
	mc := cfg.Model()
	bind := func(l *models.Llama) ([]binding, error) { return bindLlama(c, l.Parameters(), mc.TiedHead) }
	if err := probe(c, func(dev device.Device) (*models.Llama, error) { return models.NewLlama(dev, mc) }, bind); err != nil {
		return nil, "", err
	}
	mc.Dropout, mc.Seed, mc.HeadChunkRows, mc.DType, mc.Defer = o.Dropout, o.Seed, o.HeadChunkRows, o.DType, o.Defer || o.Quantize != nil
	l, err := models.NewLlama(dev, mc)
	if err != nil {
		return nil, "", fmt.Errorf("hf: %s: %w", filepath.Join(c.Dir, configFile), err)
	}
	if err := fillAll(l, bind, files, o.Quantize); err != nil {
		return nil, "", err
	}
	return l, note, nil
}

// bindLlama pairs Llama parameters with their tensors and checks what
// the checkpoint holds besides: a tied model's stored lm_head.weight must
// be the embedding, old checkpoints' rotary_emb.inv_freq buffers are
// skipped, and anything else is an error naming it.
func bindLlama(c *Checkpoint, params []*tensor.Tensor, tied bool) ([]binding, error) {
	bs, used, err := bindParams(c, params, func(name string) (string, bool, bool) {
		hn := llamaName(name)
		_, ok := c.Tensor(hn)
		return hn, false, ok
	}, llamaName)
	if err != nil {
		return nil, err
	}
	if head, ok := c.Tensor("lm_head.weight"); ok && tied {
		emb, _ := c.Tensor("model.embed_tokens.weight")
		if head.DType != emb.DType || string(head.Data) != string(emb.Data) {
			return nil, fmt.Errorf("hf: %s: lm_head.weight differs from model.embed_tokens.weight, yet tie_word_embeddings is true", head.File)
		}
		used["lm_head.weight"] = true
	}
	for _, n := range c.Names() {
		if !used[n] && !strings.HasSuffix(n, ".rotary_emb.inv_freq") {
			t, _ := c.Tensor(n)
			return nil, fmt.Errorf("hf: %s: tensor %s is not part of a Llama as config.json describes it", t.File, n)
		}
	}
	return bs, nil
}

// SaveLlama writes l in Llama's layout and names into dir: config.json
// (LlamaForCausalLM) and model.safetensors (F32; lm_head.weight omitted
// when the head is tied, as Hugging Face omits it), each through a
// temporary file and a rename.
func SaveLlama(l *models.Llama, dir string) error { return saveLlama(l, dir, safetensors.F32) }

// saveLlama is SaveLlama writing tensors of dtype dt (F32 or BF16).
func saveLlama(l *models.Llama, dir string, dt safetensors.DType) error {
	c := l.Config
	var scaling any
	if s := c.RopeScaling; s.Type != "" && s.Type != "default" {
		scaling = map[string]any{"rope_type": s.Type, "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
			"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalContext}
	}
	cfg := map[string]any{
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"hidden_size": c.Dim, "intermediate_size": c.Hidden, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim(),
		"rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta, "rope_scaling": scaling,
		"tie_word_embeddings": c.TiedHead, "vocab_size": c.Vocab, "max_position_embeddings": c.Context,
		"hidden_act": "silu", "attention_bias": false, "mlp_bias": false, "torch_dtype": torchDType(dt),
	}
	var params []savedTensor
	for _, p := range nn.Export(l) { // LoRA adapters merged
		params = append(params, savedTensor{name: llamaName(p.Name), p: p})
	}
	return writeModel(dir, cfg, params, dt)
}
