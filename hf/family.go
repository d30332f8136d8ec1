package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/safetensors"
)

// A family is how one decoder family's checkpoints read: the model_type
// and class its config.json carries, the config keys that change its
// math which memfit computes (any other such key present with a value
// that changes the math is refused by name), the defaults of its config
// class for keys a file leaves out, its layers' kinds, and its tensor
// names. Its Arch is models'. Adding a family is an entry here and one
// in models' table.
type family struct {
	models.Family
	class string // architectures[0]: "Qwen3ForCausalLM"
	// honours are the keys of mathKeys the family computes.
	honours []string
	// defaults are the values its transformers config class gives the
	// keys a config.json leaves out (Gemma 3's head_dim is 256, not
	// hidden_size/num_attention_heads).
	defaults map[string]any
	// act is the config key of its MLP's activation.
	act string
	// windows says which layers slide (below).
	windows windowRule
	// sandwich: its norms are Gemma's four per block (names below).
	sandwich bool
}

// windowRule is how a family's config says which layers slide.
type windowRule int

const (
	noWindows     windowRule = iota // sliding_window is refused (Llama)
	everyLayer                      // every layer slides when sliding_window is set (Mistral, Phi-3)
	upperLayers                     // layer_types, else use_sliding_window with layers from max_window_layers (Qwen 2, Qwen 3, SmolLM 3)
	patternLayers                   // layer_types, else every layer but each sliding_window_pattern-th (Gemma 2: 2, Gemma 3: 6)
)

// hfFamilies are the decoder families memfit reads, by model_type, with
// the defaults of transformers' config classes (5.16).
var hfFamilies = []family{
	{class: "LlamaForCausalLM", honours: []string{"head_dim"}, act: "hidden_act", defaults: map[string]any{
		"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 2048.0, "tie_word_embeddings": false, "vocab_size": 32000.0}},
	{class: "MistralForCausalLM", honours: []string{"head_dim", "sliding_window"}, act: "hidden_act", windows: everyLayer, defaults: map[string]any{
		"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 131072.0, "tie_word_embeddings": false, "vocab_size": 32000.0}},
	{class: "Qwen2ForCausalLM", honours: []string{"sliding_window", "use_sliding_window", "max_window_layers", "layer_types"},
		act: "hidden_act", windows: upperLayers, defaults: map[string]any{
			"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 32768.0, "tie_word_embeddings": false,
			"vocab_size": 151936.0, "max_window_layers": 28.0}},
	{class: "Qwen3ForCausalLM", honours: []string{"head_dim", "sliding_window", "use_sliding_window", "max_window_layers", "layer_types"},
		act: "hidden_act", windows: upperLayers, defaults: map[string]any{
			"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 32768.0, "tie_word_embeddings": false,
			"vocab_size": 151936.0, "max_window_layers": 28.0, "head_dim": 128.0}},
	{class: "Gemma2ForCausalLM", honours: []string{"head_dim", "sliding_window", "layer_types", "query_pre_attn_scalar",
		"attn_logit_softcapping", "final_logit_softcapping"}, act: "hidden_activation", windows: patternLayers, sandwich: true,
		defaults: map[string]any{"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 8192.0, "tie_word_embeddings": true,
			"vocab_size": 256000.0, "head_dim": 256.0, "query_pre_attn_scalar": 256.0, "sliding_window": 4096.0,
			"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}},
	{class: "Gemma3ForCausalLM", honours: []string{"head_dim", "sliding_window", "layer_types", "sliding_window_pattern",
		"_sliding_window_pattern", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
		"rope_local_base_freq"}, act: "hidden_activation", windows: patternLayers, sandwich: true,
		defaults: map[string]any{"rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 131072.0, "tie_word_embeddings": true,
			"vocab_size": 262208.0, "head_dim": 256.0, "query_pre_attn_scalar": 256.0, "sliding_window": 4096.0,
			"rope_local_base_freq": 10000.0}},
	{class: "Phi3ForCausalLM", honours: []string{"sliding_window", "partial_rotary_factor"}, act: "hidden_act", windows: everyLayer,
		defaults: map[string]any{"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 4096.0,
			"tie_word_embeddings": false, "vocab_size": 32064.0}},
	{class: "SmolLM3ForCausalLM", honours: []string{"sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
		"no_rope_layers", "no_rope_layer_interval"}, act: "hidden_act", windows: upperLayers, defaults: map[string]any{
		"rms_norm_eps": 1e-6, "rope_theta": 2e6, "max_position_embeddings": 32768.0, "tie_word_embeddings": true,
		"vocab_size": 128256.0, "max_window_layers": 28.0, "no_rope_layer_interval": 4.0}},
}

func init() {
	for i := range hfFamilies {
		f := &hfFamilies[i]
		m, ok := modelsFamily(f.class)
		if !ok {
			panic("hf: no models family for " + f.class)
		}
		f.Family = m
	}
}

// modelsFamily is models' family of a class (by the name its model_type
// is registered under).
func modelsFamily(class string) (models.Family, bool) {
	hf := map[string]string{"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
		"Qwen3ForCausalLM": "qwen3", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
		"Phi3ForCausalLM": "phi3", "SmolLM3ForCausalLM": "smollm3"}[class]
	return models.FamilyByHF(hf)
}

// familyOf returns the family of a config's model_type, else of its
// architectures.
func familyOf(modelType string, architectures []string) (family, bool) {
	for _, f := range hfFamilies {
		if modelType == f.HF || modelType == "" && slices.Contains(architectures, f.class) {
			return f, true
		}
	}
	return family{}, false
}

// familyNames lists the model_types memfit reads, for errors.
func familyNames() string {
	var names []string
	for _, f := range hfFamilies {
		names = append(names, fmt.Sprintf("%s (%s)", f.HF, f.class))
	}
	return "gpt2 (GPT2LMHeadModel), " + strings.Join(names, ", ")
}

// mathKeys are the config.json keys of the families memfit knows that
// change what a model computes, each with whether a value leaves the
// math as a family without the key computes it (null, false, 0, 1 for
// a factor). A family computes those it honours; any other present with
// another value is refused by name, never ignored.
var mathKeys = map[string]func(v any) bool{
	"head_dim":                    isNull,
	"sliding_window":              isNull,
	"use_sliding_window":          isFalse,
	"max_window_layers":           func(any) bool { return true }, // matters only with use_sliding_window
	"layer_types":                 isNull,
	"sliding_window_pattern":      isNull,
	"_sliding_window_pattern":     isNull,
	"query_pre_attn_scalar":       isNull,
	"attn_logit_softcapping":      isZero,
	"final_logit_softcapping":     isZero,
	"rope_local_base_freq":        isNull,
	"partial_rotary_factor":       isOne,
	"no_rope_layers":              isNull,
	"no_rope_layer_interval":      isNull,
	"attention_bias":              isFalse,
	"mlp_bias":                    isFalse,
	"lm_head_bias":                isFalse,
	"use_bidirectional_attention": isFalse,
	"use_qk_norm":                 isFalse,
	"qk_layernorm":                isFalse,
	"embedding_multiplier":        isOne,
	"residual_multiplier":         isOne,
	"attention_multiplier":        isNull,
	"logits_scaling":              isOne,
	"rope_parameters":             isNull,
}

func isNull(v any) bool { return v == nil }

func isFalse(v any) bool { return v == nil || v == false }

func isZero(v any) bool { return v == nil || v == 0.0 }

func isOne(v any) bool { return v == nil || v == 1.0 }

// checkKeys refuses the keys of raw, a config.json's object, that change
// the math in a way f does not compute.
func (f family) checkKeys(path string, raw map[string]any) error {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		neutral, ok := mathKeys[k]
		if !ok || slices.Contains(f.honours, k) || neutral(raw[k]) {
			continue
		}
		return fmt.Errorf("hf: %s: %s %s: memfit's %s does not compute it (it computes %s)", path, k, quoteJSON(raw[k]), f.HF,
			strings.Join(f.honours, ", "))
	}
	return nil
}

// quoteJSON writes v as JSON, shortened to a few hundred bytes: an error
// message never echoes a whole hostile value.
func quoteJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 200 {
		b = append(b[:200:200], []byte("…")...)
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// The tensor names of a decoder's parts (memfit's left, Hugging Face's
// right), per block model.layers.N.<name>; weights and biases alike.
var (
	llamaParts = map[string]string{
		"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
		"attn.q": "self_attn.q_proj", "attn.k": "self_attn.k_proj", "attn.v": "self_attn.v_proj", "attn.o": "self_attn.o_proj",
		"attn.qkv": "self_attn.qkv_proj", "attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm",
		"mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj", "mlp.down": "mlp.down_proj", "mlp.gate_up": "mlp.gate_up_proj",
	}
	// Gemma's four norms: its post_attention_layernorm follows the
	// attention; pre_feedforward_layernorm is what Llama's is.
	gemmaParts = func() map[string]string {
		m := map[string]string{}
		for k, v := range llamaParts {
			m[k] = v
		}
		m["mlp_norm"] = "pre_feedforward_layernorm"
		m["post_attn_norm"] = "post_attention_layernorm"
		m["post_mlp_norm"] = "post_feedforward_layernorm"
		return m
	}()
)

// tensorName maps a memfit parameter name to f's tensor name.
func (f family) tensorName(name string) string {
	switch name {
	case "embed.tokens.weight":
		return "model.embed_tokens.weight"
	case "final_norm.weight":
		return "model.norm.weight"
	case "head.weight":
		return "lm_head.weight"
	}
	// blocks.N.<part>.<weight|bias>
	rest, ok := strings.CutPrefix(name, "blocks.")
	i := strings.IndexByte(rest, '.')
	j := strings.LastIndexByte(rest, '.')
	if !ok || i < 0 || j <= i {
		return name
	}
	parts := llamaParts
	if f.sandwich {
		parts = gemmaParts
	}
	hfPart, ok := parts[rest[i+1:j]]
	if !ok {
		return name
	}
	return "model.layers." + rest[:i] + "." + hfPart + rest[j:]
}

// PEFTName is the name PEFT and transformers give the module of memfit's
// parameter name in a model of model_type modelType (its tensor name
// without ".weight"), as LoRA target lists and adapter files name them:
// "blocks.3.attn.q.weight" is "model.layers.3.self_attn.q_proj". It
// returns false for another model_type or a name the family lacks.
func PEFTName(modelType, name string) (string, bool) {
	f, ok := familyOf(modelType, nil)
	if !ok {
		return "", false
	}
	hn := f.tensorName(name)
	if hn == name {
		return "", false
	}
	return strings.TrimSuffix(strings.TrimSuffix(hn, ".weight"), ".bias"), true
}

// config is the config.json of a decoder of the family: the keys its
// transformers config class writes for what c computes.
func (f family) config(c models.DecoderConfig, dt safetensors.DType) map[string]any {
	cfg := map[string]any{
		"model_type": f.HF, "architectures": []string{f.class},
		"hidden_size": c.Dim, "intermediate_size": c.Hidden, "num_hidden_layers": c.Layers,
		"num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"rms_norm_eps": c.NormEps, "rope_theta": c.RopeTheta, "rope_scaling": nil,
		"tie_word_embeddings": c.TiedHead, "vocab_size": c.Vocab, "max_position_embeddings": c.Context,
		"torch_dtype": torchDType(dt),
	}
	if slices.Contains(f.honours, "head_dim") {
		cfg["head_dim"] = c.HeadDim
	}
	act := "silu"
	if f.Arch.Activation == "gelu_tanh" {
		act = "gelu_pytorch_tanh"
	}
	cfg[f.act] = act
	switch f.HF {
	case "llama", "mistral", "qwen3", "smollm3", "phi3":
		cfg["attention_bias"], cfg["mlp_bias"] = false, false
	}
	if s := c.RopeScaling; s.Type != "" && s.Type != "default" {
		sc := map[string]any{"rope_type": s.Type, "factor": s.Factor}
		switch s.Type {
		case "llama3":
			sc["low_freq_factor"], sc["high_freq_factor"], sc["original_max_position_embeddings"] = s.LowFreqFactor, s.HighFreqFactor, s.OriginalContext
		case "longrope", "su":
			sc = map[string]any{"type": "longrope", "short_factor": s.ShortFactor, "long_factor": s.LongFactor}
			if s.AttentionFactor != 0 {
				sc["attention_factor"] = s.AttentionFactor
			}
			if s.Factor != float64(c.Context)/float64(s.OriginalContext) {
				sc["factor"] = s.Factor
			}
			cfg["original_max_position_embeddings"] = s.OriginalContext
		}
		cfg["rope_scaling"] = sc
	}
	// Which layers slide, and how far.
	var window any
	if c.Window > 0 {
		window = c.Window
	}
	var types []string
	noRope := make([]int, c.Layers)
	for i := range c.Layers {
		k := c.Layer(i)
		t := "full_attention"
		if k.Sliding {
			t = "sliding_attention"
		}
		types = append(types, t)
		noRope[i] = 1
		if k.NoRope {
			noRope[i] = 0
		}
	}
	switch f.windows {
	case everyLayer:
		cfg["sliding_window"] = window
	case upperLayers:
		cfg["use_sliding_window"], cfg["sliding_window"], cfg["max_window_layers"], cfg["layer_types"] = window != nil, window, c.Layers, types
	case patternLayers:
		cfg["sliding_window"], cfg["layer_types"] = window, types
	}
	switch f.HF {
	case "gemma2", "gemma3_text":
		scale := c.QueryScale
		if scale == 0 {
			scale = 1 / math.Sqrt(float64(c.HeadDim))
		}
		// query_pre_attn_scalar^-½ is what the model keeps: the scalar
		// comes back rounded, so that reading it again gives the same
		// scale bit for bit (they are whole numbers: 256, 144).
		cfg["query_pre_attn_scalar"] = roundNear(1 / (scale * scale))
		cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"] = nullIfZero(c.AttnSoftcap), nullIfZero(c.FinalSoftcap)
		if f.HF == "gemma3_text" {
			local := c.LocalRopeTheta
			if local == 0 {
				local = c.RopeTheta
			}
			cfg["rope_local_base_freq"] = local
		}
	case "phi3":
		if c.RotaryDim > 0 && c.RotaryDim < c.HeadDim {
			cfg["partial_rotary_factor"] = float64(c.RotaryDim) / float64(c.HeadDim)
		}
	case "smollm3":
		cfg["no_rope_layers"] = noRope
	}
	return cfg
}

// nullIfZero is v, or JSON's null for 0 (none).
func nullIfZero(v float64) any {
	if v == 0 {
		return nil
	}
	return v
}

// roundNear is v rounded to 9 decimal places when that is within a few
// units in the last place of v: the number a config gave before memfit
// computed with it.
func roundNear(v float64) float64 {
	r := math.Round(v*1e9) / 1e9
	if math.Abs(r-v) <= 1e-12*math.Abs(v) {
		return r
	}
	return v
}

// HasPEFTLayout reports whether memfit writes LoRA adapters of a model of
// model_type modelType in PEFT's layout (the decoder families).
func HasPEFTLayout(modelType string) bool {
	_, ok := familyOf(modelType, nil)
	return ok && modelType != ""
}
