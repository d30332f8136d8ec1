package hf

import (
	"encoding/json"
	"fmt"
	"math"
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

// DecoderConfig is the part of a decoder's config.json memfit reads, for
// every family it knows (hfFamilies): Llama's keys, and those the others
// add. Pointers are keys a file may give as null.
type DecoderConfig struct {
	Architectures []string     `json:"architectures"`
	ModelType     string       `json:"model_type"`
	Dim           int          `json:"hidden_size"`
	Hidden        int          `json:"intermediate_size"`
	Layers        int          `json:"num_hidden_layers"`
	Heads         int          `json:"num_attention_heads"`
	KVHeads       int          `json:"num_key_value_heads"` // absent: Heads (Llama 1 and 2 7B)
	HeadDim       int          `json:"head_dim"`            // absent or null: hidden_size / num_attention_heads
	Eps           float64      `json:"rms_norm_eps"`
	RopeTheta     float64      `json:"rope_theta"`
	RopeScaling   *RopeScaling `json:"rope_scaling"`
	Tied          *bool        `json:"tie_word_embeddings"`
	Vocab         int          `json:"vocab_size"`
	Positions     int          `json:"max_position_embeddings"`
	Activation    string       `json:"hidden_act"`
	// GemmaActivation is Gemma's key for the MLP's activation.
	GemmaActivation string `json:"hidden_activation"`
	// Sliding windows (layer kinds: DecoderConfig.kinds).
	SlidingWindow    *int     `json:"sliding_window"`
	UseSlidingWindow *bool    `json:"use_sliding_window"`
	MaxWindowLayers  *int     `json:"max_window_layers"`
	LayerTypes       []string `json:"layer_types"`
	WindowPattern    *int     `json:"sliding_window_pattern"`
	WindowPattern2   *int     `json:"_sliding_window_pattern"` // the key transformers 5 writes
	// Gemma.
	QueryPreAttnScalar *float64 `json:"query_pre_attn_scalar"`
	AttnSoftcap        *float64 `json:"attn_logit_softcapping"`
	FinalSoftcap       *float64 `json:"final_logit_softcapping"`
	RopeLocalBase      *float64 `json:"rope_local_base_freq"`
	// Phi-3.
	PartialRotary     *float64 `json:"partial_rotary_factor"`
	OriginalPositions int      `json:"original_max_position_embeddings"`
	// SmolLM 3.
	NoRopeLayers   []int `json:"no_rope_layers"`
	NoRopeInterval *int  `json:"no_rope_layer_interval"`

	family family
	// multimodal: the config is a multimodal Gemma 3's, whose language
	// model text_config describes; its tensors are under a prefix.
	multimodal bool
	// embedScale is Gemma's embedding scale rounded to the checkpoint's
	// dtype (set by the loader; 0: float32's).
	embedScale float64
}

// RopeScaling is config.json's rope_scaling.
type RopeScaling struct {
	RopeType        string    `json:"rope_type"`
	Type            string    `json:"type"` // the older key for rope_type
	Factor          float64   `json:"factor"`
	LowFreqFactor   float64   `json:"low_freq_factor"`
	HighFreqFactor  float64   `json:"high_freq_factor"`
	Original        int       `json:"original_max_position_embeddings"`
	ShortFactor     []float64 `json:"short_factor"`
	LongFactor      []float64 `json:"long_factor"`
	AttentionFactor *float64  `json:"attention_factor"`
}

func (s *RopeScaling) kind() string {
	if s.RopeType != "" {
		return s.RopeType
	}
	return s.Type
}

// Family is the registered model (models.Family) of the config's
// architecture: "llama", "qwen3", "gemma3", ...
func (c DecoderConfig) Family() string { return c.family.Name }

// headDim is the heads' size.
func (c DecoderConfig) headDim() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	return c.Dim / max(c.Heads, 1)
}

// rotaryDim is the rotated part of a head (partial_rotary_factor; 0: all).
func (c DecoderConfig) rotaryDim() int {
	if c.PartialRotary == nil || *c.PartialRotary == 1 {
		return 0
	}
	return int(float64(c.headDim()) * *c.PartialRotary)
}

// tied is tie_word_embeddings (the family's default when absent).
func (c DecoderConfig) tied() bool { return c.Tied != nil && *c.Tied }

// window is the sliding window when one applies, else 0. A window as long
// as the positions or longer slides nothing (Phi-3.5's 262144 over
// 131072 positions).
func (c DecoderConfig) window() int {
	if c.SlidingWindow == nil || *c.SlidingWindow >= c.Positions {
		return 0
	}
	if c.family.windows == upperLayers && (c.UseSlidingWindow == nil || !*c.UseSlidingWindow) {
		return 0 // transformers sets sliding_window to None then
	}
	return *c.SlidingWindow
}

// kinds are the layers' kinds (models.LayerKind) as the family's config
// class derives them, or nil when every layer is full and rotated.
func (c DecoderConfig) kinds() []models.LayerKind {
	out := make([]models.LayerKind, c.Layers)
	any := false
	w := c.window()
	for i := range out {
		sliding := false
		switch {
		case w == 0:
		case c.LayerTypes != nil:
			sliding = c.LayerTypes[i] == "sliding_attention"
		case c.family.windows == everyLayer:
			sliding = true
		case c.family.windows == upperLayers:
			sliding = c.MaxWindowLayers == nil || i >= *c.MaxWindowLayers
		case c.family.windows == patternLayers:
			sliding = (i+1)%c.pattern() != 0
		}
		out[i].Sliding = sliding
		if c.NoRopeLayers != nil {
			out[i].NoRope = c.NoRopeLayers[i] == 0 // 1: the layer uses RoPE
		} else if c.NoRopeInterval != nil {
			out[i].NoRope = (i+1)%*c.NoRopeInterval == 0
		}
		any = any || out[i] != models.LayerKind{}
	}
	if !any {
		return nil
	}
	return out
}

// pattern is Gemma's sliding_window_pattern: every pattern-th layer is
// global (Gemma 2: 2; Gemma 3: 6 unless the config says). transformers
// reads sliding_window_pattern alone; the _sliding_window_pattern it
// writes beside layer_types is ignored, as layer_types decide.
func (c DecoderConfig) pattern() int {
	switch {
	case c.WindowPattern != nil:
		return *c.WindowPattern
	case c.family.HF == "gemma2":
		return 2
	}
	return 6
}

// Model is the models.DecoderConfig c describes. c must be one
// ReadDecoderConfig returned.
func (c DecoderConfig) Model() models.DecoderConfig {
	f := c.family
	if f.HF == "" {
		f, _ = familyOf("llama", nil)
	}
	m := models.DecoderConfig{Arch: f.Arch, Layers: c.Layers, Heads: c.Heads, KVHeads: c.KVHeads, Dim: c.Dim, HeadDim: c.HeadDim,
		Hidden: c.Hidden, Context: c.Positions, Vocab: c.Vocab, RopeTheta: c.RopeTheta, NormEps: c.Eps, TiedHead: c.tied(),
		RotaryDim: c.rotaryDim(), Window: c.window(), LayerKinds: c.kinds(), EmbedScale: c.embedScale}
	if s := c.RopeScaling; s != nil {
		m.RopeScaling = nn.RopeScaling{Type: s.kind(), Factor: s.Factor, LowFreqFactor: s.LowFreqFactor, HighFreqFactor: s.HighFreqFactor,
			OriginalContext: s.Original, ShortFactor: s.ShortFactor, LongFactor: s.LongFactor}
		if k := s.kind(); k == "longrope" || k == "su" {
			// Phi-3 gives the pretrained context beside rope_scaling,
			// and transformers takes the factor from the two lengths.
			if c.OriginalPositions > 0 {
				m.RopeScaling.OriginalContext = c.OriginalPositions
			} else if m.RopeScaling.OriginalContext == 0 {
				m.RopeScaling.OriginalContext = c.Positions
			}
			if s.Factor == 0 {
				m.RopeScaling.Factor = float64(c.Positions) / float64(m.RopeScaling.OriginalContext)
			}
			if s.AttentionFactor != nil {
				m.RopeScaling.AttentionFactor = *s.AttentionFactor
			}
		}
	}
	if c.RopeLocalBase != nil {
		m.LocalRopeTheta = *c.RopeLocalBase
	}
	if c.QueryPreAttnScalar != nil {
		m.QueryScale = 1 / math.Sqrt(*c.QueryPreAttnScalar)
	}
	if c.AttnSoftcap != nil {
		m.AttnSoftcap = *c.AttnSoftcap
	}
	if c.FinalSoftcap != nil {
		m.FinalSoftcap = *c.FinalSoftcap
	}
	return m
}

// Architecture names the family of a checkpoint's model: "gpt2", or a
// decoder's model_type ("llama", "qwen3", "gemma3_text", ...).
// config.json decides when present (model_type, else architectures);
// without it, the tensor names do (GPT-2's or Llama's). Anything else is
// an error naming the file and what memfit reads.
func Architecture(c *Checkpoint) (string, error) {
	b, path, err := readConfig(c.Dir)
	switch {
	case err != nil:
		return "", err
	case b != nil:
		var cfg struct {
			ModelType     string          `json:"model_type"`
			Architectures []string        `json:"architectures"`
			TextConfig    json.RawMessage `json:"text_config"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return "", fmt.Errorf("hf: %s: %v", path, err)
		}
		if cfg.ModelType == "gpt2" || cfg.ModelType == "" && len(cfg.Architectures) > 0 && cfg.Architectures[0] == "GPT2LMHeadModel" {
			return "gpt2", nil
		}
		if isMultimodalGemma3(cfg.ModelType, cfg.Architectures) && len(cfg.TextConfig) > 0 {
			return "gemma3_text", nil // its language model (ReadDecoderConfig)
		}
		if f, ok := familyOf(cfg.ModelType, cfg.Architectures); ok {
			return f.HF, nil
		}
		return "", fmt.Errorf("hf: %s: model_type %s, architectures %s: memfit imports %s", path, quoteJSON(cfg.ModelType),
			quoteJSON(cfg.Architectures), familyNames())
	}
	if c.set != nil {
		if _, ok := c.Tensor("model.embed_tokens.weight"); ok {
			return "llama", nil
		}
		if _, ok := lookup(c, "wte.weight"); ok {
			return "gpt2", nil
		}
	}
	return "", fmt.Errorf("hf: %s: no config.json, and neither GPT-2's wte.weight nor Llama's model.embed_tokens.weight: not a model memfit imports", c.Dir)
}

var llamaLayerRE = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

// ReadDecoderConfig reads config.json of a decoder checkpoint of any
// family memfit reads and checks that memfit computes what it describes:
// a config key that changes the math in a way memfit does not compute,
// an unknown activation or rope scaling, keys that contradict each other
// (heads that do not divide, layer_types not one per layer, ...) are
// errors naming the file and the key. Keys it lacks take the defaults of
// the family's transformers config class. Without config.json it infers
// a Llama's shape from the tensors and says so in the returned note:
// heads of 64 (or, for narrower widths, the largest power of two that
// divides both the width and k_proj's rows), context 2048, rope_theta
// 10000, ε 1e-5, a tied head when lm_head.weight is absent.
func ReadDecoderConfig(c *Checkpoint) (DecoderConfig, string, error) {
	var cfg DecoderConfig
	b, path, err := readConfig(c.Dir)
	switch {
	case err != nil:
		return cfg, "", err
	case b != nil:
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			return cfg, "", fmt.Errorf("hf: %s: %v", path, err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return cfg, "", fmt.Errorf("hf: %s: %v", path, err)
		}
		multimodal := isMultimodalGemma3(cfg.ModelType, cfg.Architectures)
		if multimodal {
			// A multimodal Gemma 3 (4B and up): its language model is a
			// gemma3_text, described by text_config.
			text, ok := raw["text_config"].(map[string]any)
			if !ok {
				return cfg, "", fmt.Errorf("hf: %s: model_type gemma3 without a text_config object: memfit reads a multimodal Gemma 3's language model from it", path)
			}
			raw = text
			raw["model_type"] = "gemma3_text"
			cfg = DecoderConfig{}
		}
		f, ok := familyOf(stringOf(raw["model_type"]), cfg.Architectures)
		if !ok {
			return cfg, "", fmt.Errorf("hf: %s: model_type %s: not a decoder memfit reads (%s)", path, quoteJSON(raw["model_type"]), familyNames())
		}
		if err := f.checkKeys(path, raw); err != nil {
			return cfg, "", err
		}
		for k, v := range f.defaults {
			if _, ok := raw[k]; !ok {
				raw[k] = v
			}
		}
		b, err := json.Marshal(raw)
		if err == nil {
			cfg = DecoderConfig{}
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			return cfg, "", fmt.Errorf("hf: %s: %v", path, err)
		}
		cfg.family, cfg.multimodal = f, multimodal
		if cfg.KVHeads == 0 {
			cfg.KVHeads = cfg.Heads
		}
		return cfg, "", cfg.check(path)
	}
	if c.set == nil {
		return cfg, "", fmt.Errorf("hf: %s: no config.json", c.Dir)
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
	tied := !hasHead
	cfg = DecoderConfig{ModelType: "llama", Dim: dim, Hidden: up.Shape[0], Layers: layers, Heads: dim / hd, KVHeads: kvRows / hd,
		Eps: 1e-5, RopeTheta: 10000, Tied: &tied, Vocab: emb.Shape[0], Positions: 2048}
	cfg.family, _ = familyOf("llama", nil)
	if err := cfg.check(c.Dir + " (no config.json; inferred from the tensors)"); err != nil {
		return cfg, "", err
	}
	note := fmt.Sprintf("hf: %s has no config.json; inferred from the tensors: %d layers, width %d, %d heads and %d key/value heads (heads of %d), MLP width %d, vocabulary %d, %s head; assumed context 2048, rope_theta 10000, rms_norm_eps 1e-5",
		c.Dir, cfg.Layers, cfg.Dim, cfg.Heads, cfg.KVHeads, hd, cfg.Hidden, cfg.Vocab, map[bool]string{true: "tied", false: "untied"}[tied])
	return cfg, note, nil
}

// isMultimodalGemma3 reports whether a config is a multimodal Gemma 3's
// (4B and up), whose language model memfit reads.
func isMultimodalGemma3(modelType string, architectures []string) bool {
	return modelType == "gemma3" || modelType == "" && slices.Contains(architectures, "Gemma3ForConditionalGeneration")
}

// stringOf is v when it is a string, else "".
func stringOf(v any) string {
	s, _ := v.(string)
	return s
}

// check bounds a decoder config whose defaults have been applied and
// checks that its keys agree with each other and with what memfit
// computes.
func (c DecoderConfig) check(path string) error {
	f := c.family
	bad := func(key string, v any, why string) error {
		return fmt.Errorf("hf: %s: %s %s: %s", path, key, quoteJSON(v), why)
	}
	err := checkBounds(path,
		bound{"num_hidden_layers", c.Layers, 1, MaxLayers, "the bound on layers"},
		bound{"hidden_size", c.Dim, 1, MaxWidth, "the bound on widths"},
		bound{"num_attention_heads", c.Heads, 1, MaxHeads, "the bound on heads"},
		bound{"max_position_embeddings", c.Positions, 1, MaxPositions, "the bound on positions"},
		bound{"vocab_size", c.Vocab, 1, MaxVocab, "the bound on vocabularies"},
		bound{"intermediate_size", c.Hidden, 1, MaxMLPWidth, "the bound on MLP widths"},
		bound{"num_key_value_heads", c.KVHeads, 1, c.Heads, "more than num_attention_heads"},
		bound{"head_dim", c.HeadDim, 0, MaxWidth, "the bound on widths"})
	if err != nil {
		return err
	}
	switch {
	case c.HeadDim == 0 && c.Dim%c.Heads != 0:
		return bad("num_attention_heads", c.Heads, fmt.Sprintf("does not divide hidden_size %d (and no head_dim is given)", c.Dim))
	case c.Heads%c.KVHeads != 0:
		return bad("num_key_value_heads", c.KVHeads, fmt.Sprintf("does not divide num_attention_heads %d", c.Heads))
	case int64(c.Heads)*int64(c.headDim()) > MaxWidth:
		return bad("head_dim", c.headDim(), fmt.Sprintf("times num_attention_heads %d is over the bound on widths, %d", c.Heads, MaxWidth))
	case c.rotaryDim() == 0 && c.headDim()%2 != 0:
		return bad("head_dim", c.headDim(), "is odd: rotary embeddings pair a head's halves")
	}
	act := c.Activation
	if f.act == "hidden_activation" {
		act = c.GemmaActivation
		if act == "" {
			act = "gelu_pytorch_tanh"
		}
	}
	want := "silu"
	if f.Arch.Activation == "gelu_tanh" {
		want = "gelu_pytorch_tanh"
	}
	if act != "" && act != want && !(want == "gelu_pytorch_tanh" && act == "gelu_tanh") {
		return bad(f.act, act, fmt.Sprintf("memfit's %s uses %s", f.HF, want))
	}
	if err := checkPositive(path, []string{"rms_norm_eps"}, []float64{c.Eps}, 1); err != nil {
		return err
	}
	if err := checkPositive(path, []string{"rope_theta"}, []float64{c.RopeTheta}, 0); err != nil {
		return err
	}
	for _, p := range []struct {
		key string
		v   *float64
	}{{"rope_local_base_freq", c.RopeLocalBase}, {"query_pre_attn_scalar", c.QueryPreAttnScalar}} {
		if p.v != nil {
			if err := checkPositive(path, []string{p.key}, []float64{*p.v}, 0); err != nil {
				return err
			}
		}
	}
	for _, p := range []struct {
		key string
		v   *float64
	}{{"attn_logit_softcapping", c.AttnSoftcap}, {"final_logit_softcapping", c.FinalSoftcap}} {
		if p.v != nil && *p.v != 0 {
			if err := checkPositive(path, []string{p.key}, []float64{*p.v}, 0); err != nil {
				return err
			}
		}
	}
	if p := c.PartialRotary; p != nil {
		switch d := c.rotaryDim(); {
		case !(*p > 0 && *p <= 1):
			return bad("partial_rotary_factor", *p, "want a fraction in (0, 1]")
		case *p != 1 && (d < 2 || d%2 != 0):
			return bad("partial_rotary_factor", *p, fmt.Sprintf("rotates %d of head_dim %d elements: want an even number, at least 2", d, c.headDim()))
		}
	}
	if err := c.checkWindows(path, bad); err != nil {
		return err
	}
	if s := c.RopeScaling; s != nil {
		if err := c.checkScaling(path, s); err != nil {
			return err
		}
	}
	return nil
}

// checkWindows checks the keys that say which layers slide and rotate.
func (c DecoderConfig) checkWindows(path string, bad func(key string, v any, why string) error) error {
	if w := c.SlidingWindow; w != nil && *w < 1 {
		return bad("sliding_window", *w, "want a number of keys of at least 1 (or null)")
	}
	if t := c.LayerTypes; t != nil {
		if len(t) != c.Layers {
			return bad("layer_types", fmt.Sprintf("%d entries", len(t)), fmt.Sprintf("want one per layer: num_hidden_layers is %d", c.Layers))
		}
		for i, k := range t {
			switch k {
			case "full_attention":
			case "sliding_attention":
				if c.SlidingWindow == nil {
					return bad("layer_types", k, fmt.Sprintf("layer %d slides, yet sliding_window is null", i))
				}
			default:
				return bad("layer_types", k, fmt.Sprintf("layer %d: memfit knows full_attention and sliding_attention", i))
			}
		}
	}
	for _, p := range []struct {
		key string
		v   *int
	}{{"sliding_window_pattern", c.WindowPattern}, {"_sliding_window_pattern", c.WindowPattern2}, {"no_rope_layer_interval", c.NoRopeInterval}, {"max_window_layers", c.MaxWindowLayers}} {
		if p.v != nil && (*p.v < 1 && p.key != "max_window_layers" || *p.v < 0) {
			return bad(p.key, *p.v, "want a number of layers of at least 1")
		}
	}
	if n := c.NoRopeLayers; n != nil {
		if len(n) != c.Layers {
			return bad("no_rope_layers", fmt.Sprintf("%d entries", len(n)), fmt.Sprintf("want one per layer: num_hidden_layers is %d", c.Layers))
		}
		for i, v := range n {
			if v != 0 && v != 1 {
				return bad("no_rope_layers", v, fmt.Sprintf("layer %d: want 1 (rotary embeddings) or 0 (none)", i))
			}
		}
	}
	return nil
}

// checkScaling checks rope_scaling against what memfit computes.
func (c DecoderConfig) checkScaling(path string, s *RopeScaling) error {
	switch k := s.kind(); k {
	case "", "default":
	case "linear":
		return checkPositive(path, []string{"rope_scaling.factor"}, []float64{s.Factor}, 0)
	case "llama3":
		err := checkPositive(path, []string{"rope_scaling.factor", "rope_scaling.low_freq_factor", "rope_scaling.high_freq_factor"},
			[]float64{s.Factor, s.LowFreqFactor, s.HighFreqFactor}, 0)
		if err != nil {
			return err
		}
		return checkBounds(path, bound{"rope_scaling.original_max_position_embeddings", s.Original, 1, MaxPositions, "the bound on positions"})
	case "longrope", "su":
		half := c.headDim() / 2
		if d := c.rotaryDim(); d > 0 {
			half = d / 2
		}
		for _, f := range []struct {
			key string
			v   []float64
		}{{"rope_scaling.short_factor", s.ShortFactor}, {"rope_scaling.long_factor", s.LongFactor}} {
			if len(f.v) != half {
				return fmt.Errorf("hf: %s: %s has %d factors: want %d, half the rotated part of a head", path, f.key, len(f.v), half)
			}
			if err := checkPositive(path, []string{f.key}, []float64{minOf(f.v)}, 0); err != nil {
				return err
			}
			if err := checkPositive(path, []string{f.key}, []float64{maxOf(f.v)}, 0); err != nil {
				return err
			}
		}
		if a := s.AttentionFactor; a != nil {
			if err := checkPositive(path, []string{"rope_scaling.attention_factor"}, []float64{*a}, 0); err != nil {
				return err
			}
		}
		return checkBounds(path, bound{"original_max_position_embeddings", c.OriginalPositions, 0, MaxPositions, "the bound on positions"})
	default:
		return fmt.Errorf("hf: %s: rope_scaling %s: memfit knows rope_type linear, llama3 and longrope", path, strconv.Quote(k))
	}
	return nil
}

func minOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		if !(x >= m) {
			m = x
		}
	}
	return m
}

func maxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		if !(x <= m) {
			m = x
		}
	}
	return m
}

// Params is the parameter count of the models.Decoder c describes:
// exact, computed from the config alone (see GPT2Config.Params). c must
// be one ReadDecoderConfig returned.
func (c DecoderConfig) Params() int64 { return c.Model().Params() }

// LoadDecoder builds a models.Decoder on dev from a decoder checkpoint of
// any family memfit reads (a directory or a .safetensors file) and
// returns it with a note when the shape was inferred. Parameters are F32
// (16-bit tensors are widened exactly).
func LoadDecoder(dev device.Device, path string) (*models.Decoder, string, error) {
	return LoadDecoderWith(dev, path, Options{})
}

// LoadDecoderWith is LoadDecoder with options (dropout applies to the
// attention probabilities). Names are the family's; q_proj and k_proj
// (and Phi-3's fused qkv_proj) are used as stored, since memfit's rotary
// embeddings pair elements as Hugging Face's rotate_half does. A stored
// lm_head.weight of a tied model must equal the embedding; the
// rotary_emb.inv_freq buffers of old checkpoints are ignored, and any
// other tensor memfit would not use is an error naming it. Gemma's
// embedding scale is √hidden_size rounded to the stored embedding's
// dtype, as transformers casts its buffer to the weights'.
func LoadDecoderWith(dev device.Device, path string, o Options) (*models.Decoder, string, error) {
	if err := o.check(); err != nil {
		return nil, "", err
	}
	c, err := Open(path)
	if err != nil {
		return nil, "", err
	}
	files := holdOpen(c)
	defer files.done()
	cfg, note, err := ReadDecoderConfig(c)
	if err != nil {
		return nil, "", err
	}
	if cfg.family.Arch.ScaleEmbeddings {
		// transformers casts the scale to the embedding's dtype.
		for _, n := range []string{"model.embed_tokens.weight", "language_model.model.embed_tokens.weight", "model.language_model.embed_tokens.weight"} {
			if e, ok := c.Tensor(n); ok {
				cfg.embedScale = roundTo(e.DType, math.Sqrt(float64(cfg.Dim)))
			}
		}
	}
	mc := cfg.Model()
	if !c.Weights() {
		mc.Dropout, mc.Seed, mc.HeadChunkRows, mc.DType = o.Dropout, o.Seed, o.HeadChunkRows, o.DType
		l, err := shapeOnly(c, dev, o, func(defer_ bool) (*models.Decoder, error) {
			mc.Defer = defer_
			return models.NewDecoder(dev, mc)
		})
		return l, note, err
	}
	bind := func(l *models.Decoder) ([]binding, error) {
		return bindDecoder(c, cfg, l.Parameters(), mc.TiedHead)
	}
	if err := probe(c, func(dev device.Device) (*models.Decoder, error) { return models.NewDecoder(dev, mc) }, bind); err != nil {
		return nil, "", err
	}
	mc.Dropout, mc.Seed, mc.HeadChunkRows, mc.DType, mc.Defer = o.Dropout, o.Seed, o.HeadChunkRows, o.DType, o.Defer || o.Quantize != nil
	l, err := models.NewDecoder(dev, mc)
	if err != nil {
		return nil, "", fmt.Errorf("hf: %s: %w", filepath.Join(c.Dir, configFile), err)
	}
	if err := fillAll(l, bind, files, o.Quantize, o.Park); err != nil {
		return nil, "", err
	}
	return l, note, nil
}

// roundTo rounds v to a safetensors dtype's precision.
func roundTo(dt safetensors.DType, v float64) float64 {
	switch dt {
	case safetensors.BF16:
		return device.Round(device.BF16, v)
	case safetensors.F16:
		return device.Round(device.F16, v)
	}
	return device.Round(device.F32, v)
}

// bindDecoder pairs a decoder's parameters with their tensors and checks
// what the checkpoint holds besides: a tied model's stored lm_head.weight
// must be the embedding, old checkpoints' rotary_emb.inv_freq buffers
// are skipped, and anything else is an error naming it. A multimodal
// Gemma 3's language model is read from under its prefix
// (language_model.model., or model.language_model. as transformers 5
// saves it), its vision tower and projector left aside.
func bindDecoder(c *Checkpoint, cfg DecoderConfig, params []*tensor.Tensor, tied bool) ([]binding, error) {
	f := cfg.family
	name, head, aside := f.tensorName, "lm_head.weight", func(string) bool { return false }
	if cfg.multimodal {
		prefix := ""
		for _, p := range []string{"language_model.", "model.language_model."} {
			if _, ok := c.Tensor(p + "model.embed_tokens.weight"); ok {
				prefix = p
			}
			if _, ok := c.Tensor(p + "embed_tokens.weight"); ok {
				prefix = p
			}
		}
		if prefix == "" {
			return nil, fmt.Errorf("hf: %s: a multimodal Gemma 3 without language_model.model.embed_tokens.weight or model.language_model.embed_tokens.weight", c.Dir)
		}
		name = func(p string) string {
			n := f.tensorName(p)
			if prefix == "model.language_model." {
				if n == "lm_head.weight" {
					return n
				}
				return prefix + strings.TrimPrefix(n, "model.")
			}
			return prefix + n
		}
		if prefix == "language_model." {
			head = prefix + head
		}
		aside = func(n string) bool {
			for _, p := range []string{"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."} {
				if strings.HasPrefix(n, p) {
					return true
				}
			}
			return false
		}
	}
	bs, used, err := bindParams(c, params, func(p string) (string, bool, bool) {
		hn := name(p)
		_, ok := c.Tensor(hn)
		return hn, false, ok
	}, name)
	if err != nil {
		return nil, err
	}
	if h, ok := c.Tensor(head); ok && tied {
		emb, _ := c.Tensor(name("embed.tokens.weight"))
		if h.DType != emb.DType || string(h.Data) != string(emb.Data) {
			return nil, fmt.Errorf("hf: %s: %s differs from %s, yet tie_word_embeddings is true", h.File, head, name("embed.tokens.weight"))
		}
		used[head] = true
	}
	for _, n := range c.Names() {
		if !used[n] && !strings.HasSuffix(n, ".rotary_emb.inv_freq") && !aside(n) {
			t, _ := c.Tensor(n)
			return nil, fmt.Errorf("hf: %s: tensor %s is not part of a %s as config.json describes it", t.File, n, f.HF)
		}
	}
	return bs, nil
}

// SaveDecoder writes l in its family's layout and names into dir:
// config.json (the family's model_type, class and keys) and
// model.safetensors (F32; lm_head.weight omitted when the head is tied,
// as Hugging Face omits it), each through a temporary file and a rename.
func SaveDecoder(l *models.Decoder, dir string) error {
	return saveDecoder(l, dir, safetensors.F32, SaveOptions{})
}

// saveDecoder is SaveDecoder writing tensors of dtype dt (F32 or BF16)
// and o's companion files.
func saveDecoder(l *models.Decoder, dir string, dt safetensors.DType, o SaveOptions) error {
	f, ok := familyOf(l.Config.Arch.Family, nil)
	if l.Config.Arch.Family == "" {
		f, ok = familyOf("llama", nil)
	}
	if !ok {
		return fmt.Errorf("hf: a %s decoder has no Hugging Face layout", l.Config.Arch.Family)
	}
	var params []savedTensor
	for _, p := range nn.Export(l) { // LoRA adapters merged
		params = append(params, savedTensor{name: f.tensorName(p.Name), p: p})
	}
	cfg := f.config(l.Config, dt)
	files, err := o.companionFiles(cfg)
	if err != nil {
		return err
	}
	if o.Adapters {
		adapters, err := peftFiles(l, f.HF, o.From, safetensors.F32)
		if err != nil {
			return err
		}
		files = append(files, adapters...)
	}
	return writeModel(dir, cfg, params, dt, files, o.ShardBytes)
}
