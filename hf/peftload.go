package hf

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/memfit/memfit/internal/regularfile"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/safetensors"
	"github.com/memfit/memfit/tensor"
)

// PEFTConfig is what memfit reads of a PEFT adapter_config.json: the
// adapters' rank, scale and dropout, and which layers they adapt. Keys a
// file leaves out take LoraConfig's defaults (r 8, lora_alpha 8,
// lora_dropout 0).
type PEFTConfig struct {
	Rank    int     // r, every adapter's
	Alpha   float64 // lora_alpha
	RSLoRA  bool    // use_rslora: the scale is Alpha/√Rank, not Alpha/Rank
	Dropout float64 // lora_dropout, on the adapters' input while training
	// Base is base_model_name_or_path, for messages alone: it names the
	// base as the trainer saw it (a hub id, a path on another machine),
	// so nothing is checked against it.
	Base string

	targets, exclude peftModules
}

// Scale is the factor of the adapters' update, s in x·Wᵀ + s·(x·Aᵀ)·Bᵀ:
// Alpha/Rank, or Alpha/√Rank with use_rslora (rank-stabilized LoRA).
func (c PEFTConfig) Scale() float64 {
	if c.RSLoRA {
		return c.Alpha / math.Sqrt(float64(c.Rank))
	}
	return c.Alpha / float64(c.Rank)
}

// PEFTAdapters are the adapters LoadPEFT attached.
type PEFTAdapters struct {
	PEFTConfig
	// Layers are the adapted Linear layers' paths ("blocks.0.attn.q"),
	// in model order.
	Layers []string
}

// PEFTOptions are LoadPEFT's choices beyond the files'.
type PEFTOptions struct {
	// DType of the adapters' A and B (F32 when unset), as
	// lora.Config.DType: the file's values are converted to it.
	DType tensor.DType
	// Dropout, when set, is the adapters' dropout instead of the file's
	// lora_dropout: a run that trains them further may choose another
	// (it changes nothing at inference).
	Dropout *float64
}

// peftRefused are adapter_config.json's keys that make PEFT compute
// something memfit's adapters do not (or adapt layers the tensors alone
// do not say), each with the values that change nothing and why another
// is refused. A key not listed (inference_mode, revision,
// init_lora_weights but below, ...) changes nothing once the adapters are
// trained.
var peftRefused = []struct {
	key     string
	neutral func(any) bool
	why     string
}{
	{"alora_invocation_tokens", isEmpty, "activated LoRA (aLoRA) adapts only after its invocation tokens; memfit's adapters apply everywhere"},
	{"alpha_pattern", isEmpty, "per-layer lora_alpha: memfit reads one scale for every adapter of a file"},
	{"bias", func(v any) bool { return v == nil || v == "none" }, "PEFT trains the base's biases too (memfit reads bias \"none\")"},
	{"fan_in_fan_out", isFalse, "weights stored (in, out), as GPT-2's Conv1D; memfit's decoders have Linear layers (out, in)"},
	{"layer_replication", isEmpty, "PEFT duplicates layers of the base; memfit adapts the base as it is"},
	{"layers_pattern", isEmpty, "with layers_to_transform: memfit reads every layer target_modules choose"},
	{"layers_to_transform", isEmpty, "adapters on some layers of a name only: memfit reads every layer target_modules choose"},
	{"lora_bias", isFalse, "lora_B with a bias; memfit's adapters have none"},
	{"modules_to_save", isEmpty, "PEFT trains and saves whole copies of these modules, which memfit does not read"},
	{"rank_pattern", isEmpty, "per-layer ranks: memfit reads one rank for every adapter of a file"},
	{"target_parameters", isEmpty, "adapters on parameters (mixtures of experts), not Linear layers"},
	{"trainable_token_indices", isEmpty, "PEFT trains rows of the embedding, which memfit does not read"},
	{"use_dora", isFalse, "DoRA (weight-decomposed LoRA) rescales each adapted weight by a magnitude vector; memfit's LoRA does not"},
	{"use_qalora", isFalse, "QALoRA pools the adapters' input by groups; memfit's LoRA does not"},
}

// isEmpty: null, false, or an empty string, list or object.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

// baseChangingInits are init_lora_weights whose adapters, as saved
// unconverted, apply to a base that the initialization changed (PiSSA,
// OLoRA and CorDA subtract the adapters' first values from the weights;
// LoftQ replaces them with a quantized residual): on the original base
// they compute another function.
var baseChangingInits = []string{"pissa", "olora", "corda", "loftq"}

// ReadPEFTConfig reads dir's adapter_config.json and checks that it
// describes LoRA adapters memfit computes as PEFT does: peft_type LORA,
// task_type CAUSAL_LM (or none), r a whole number from 1 to MaxWidth,
// lora_alpha above 0, lora_dropout in [0, 1), and none of the features
// of peftRefused (DoRA, biases, modules_to_save, per-layer ranks, ...).
// Each refusal names the file and the key.
func ReadPEFTConfig(dir string) (PEFTConfig, error) {
	var c PEFTConfig
	path := filepath.Join(dir, peftConfig)
	b, err := regularfile.Read(path, maxConfig)
	if errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("hf: %s: no such file (LoRA adapters in PEFT's layout are %s beside %s)", path, peftConfig, peftWeights)
	}
	if err != nil {
		return c, fmt.Errorf("hf: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return c, fmt.Errorf("hf: %s: %v", path, err)
	}
	bad := func(key string, v any, why string) error {
		return fmt.Errorf("hf: %s: %s %s: %s", path, key, quoteJSON(v), why)
	}
	switch v, ok := raw["peft_type"]; {
	case !ok:
		return c, fmt.Errorf("hf: %s: no peft_type: memfit reads LoRA adapters (peft_type LORA)", path)
	case v != "LORA":
		return c, bad("peft_type", v, "memfit reads LoRA adapters (LORA)")
	}
	if v := raw["task_type"]; v != nil && v != "CAUSAL_LM" {
		return c, bad("task_type", v, "memfit's decoders are causal language models (CAUSAL_LM); another task's adapters come with a head of their own")
	}
	for _, k := range peftRefused {
		if v, ok := raw[k.key]; ok && !k.neutral(v) {
			return c, bad(k.key, v, k.why)
		}
	}
	if s, ok := raw["init_lora_weights"].(string); ok {
		for _, p := range baseChangingInits {
			if strings.HasPrefix(strings.ToLower(s), p) {
				return c, bad("init_lora_weights", s, "such adapters, saved unconverted, apply to the base their initialization changed, not to the original one (save them with PEFT's path_initial_model_for_weight_conversion)")
			}
		}
	}
	number := func(key string, def float64) (float64, error) {
		v, ok := raw[key]
		if !ok || v == nil {
			return def, nil
		}
		f, ok := v.(float64)
		if !ok {
			return 0, bad(key, v, "want a number")
		}
		return f, nil
	}
	r, err := number("r", 8)
	if err != nil {
		return c, err
	}
	if !(r >= 1 && r <= MaxWidth) || r != math.Trunc(r) {
		return c, bad("r", r, fmt.Sprintf("want a whole number from 1 to %d", MaxWidth))
	}
	if c.Alpha, err = number("lora_alpha", 8); err != nil {
		return c, err
	}
	if !(c.Alpha > 0) || math.IsInf(c.Alpha, 0) {
		return c, bad("lora_alpha", c.Alpha, "want a finite number above 0")
	}
	if c.Dropout, err = number("lora_dropout", 0); err != nil {
		return c, err
	}
	if !(c.Dropout >= 0 && c.Dropout < 1) {
		return c, bad("lora_dropout", c.Dropout, "want a probability in [0, 1)")
	}
	switch v := raw["use_rslora"].(type) {
	case nil:
	case bool:
		c.RSLoRA = v
	default:
		return c, bad("use_rslora", v, "want true or false")
	}
	c.Rank = int(r)
	c.Base, _ = raw["base_model_name_or_path"].(string)
	if c.targets, err = readPEFTModules(raw["target_modules"], true); err != nil {
		return c, bad("target_modules", raw["target_modules"], err.Error())
	}
	if c.exclude, err = readPEFTModules(raw["exclude_modules"], false); err != nil {
		return c, bad("exclude_modules", raw["exclude_modules"], err.Error())
	}
	return c, nil
}

// peftModules is target_modules (or exclude_modules) as PEFT reads it:
// a list chooses the modules named by an entry or whose name ends in "."
// and an entry; a string is a regular expression the whole name must
// match (Go's RE2 syntax, which Python's re shares but for lookarounds
// and backreferences), except target_modules' "all-linear": every Linear
// layer but the output layer, which memfit's walk of a decoder never
// reaches anyway. Unset, it chooses nothing.
type peftModules struct {
	set   bool
	all   bool
	names []string
	re    *regexp.Regexp
}

func readPEFTModules(v any, target bool) (peftModules, error) {
	switch v := v.(type) {
	case nil:
		return peftModules{}, nil
	case string:
		if target && v == "all-linear" {
			return peftModules{set: true, all: true}, nil
		}
		re, err := regexp.Compile(`^(?:` + v + `)$`)
		if err != nil {
			return peftModules{}, fmt.Errorf("not a regular expression memfit reads (RE2: no lookarounds or backreferences): %v", err)
		}
		return peftModules{set: true, re: re}, nil
	case []any:
		m := peftModules{set: true}
		for _, e := range v {
			s, ok := e.(string)
			if !ok || s == "" {
				return peftModules{}, fmt.Errorf("entry %s is not a module name", quoteJSON(e))
			}
			m.names = append(m.names, s)
		}
		return m, nil
	}
	return peftModules{}, fmt.Errorf("want a list of module names or a regular expression")
}

// match reports whether m chooses the module called name.
func (m peftModules) match(name string) bool {
	switch {
	case !m.set:
		return false
	case m.all:
		return true
	case m.re != nil:
		return m.re.MatchString(name)
	}
	for _, n := range m.names {
		if name == n || strings.HasSuffix(name, "."+n) {
			return true
		}
	}
	return false
}

// chooses reports whether the config's targets choose the module.
func (c PEFTConfig) chooses(module string) bool {
	return c.targets.match(module) && !c.exclude.match(module)
}

// peftKey splits an adapter tensor's name into its module and its
// matrix, lora_A or lora_B: [base_model.model.]<module>.lora_X[.default]
// .weight (older PEFT saved the adapter's name, "default"). Tensors of
// adapters memfit does not compute are refused by what they are.
func peftKey(name string) (module, which string, err error) {
	n := strings.TrimPrefix(name, "base_model.model.")
	for _, w := range []string{"lora_A", "lora_B"} {
		for _, suffix := range []string{"." + w + ".weight", "." + w + ".default.weight"} {
			if m, ok := strings.CutSuffix(n, suffix); ok && m != "" {
				return m, w, nil
			}
		}
	}
	switch {
	case strings.Contains(n, ".lora_embedding_A") || strings.Contains(n, ".lora_embedding_B"):
		return "", "", fmt.Errorf("an embedding's adapter: memfit adapts Linear layers")
	case strings.Contains(n, ".lora_magnitude_vector"):
		return "", "", fmt.Errorf("DoRA's magnitude vector: memfit's LoRA does not compute DoRA")
	case strings.Contains(n, ".lora_B.") && strings.HasSuffix(n, ".bias"):
		return "", "", fmt.Errorf("a bias of lora_B (lora_bias): memfit's adapters have none")
	case strings.Contains(n, ".lora_A.") || strings.Contains(n, ".lora_B."):
		return "", "", fmt.Errorf("not named <module>.lora_A.weight or <module>.lora_A.default.weight (another adapter's name?)")
	}
	return "", "", fmt.Errorf("not a LoRA adapter's lora_A or lora_B weight")
}

// nonFinite returns the index and value of the first NaN or infinity
// among b's elements of dtype d (F32, BF16 or F16), read from their
// exponent bits before anything is converted; -1 when there is none.
func nonFinite(d safetensors.DType, b []byte) (int, float32) {
	switch d {
	case safetensors.F32:
		for i := 0; i+4 <= len(b); i += 4 {
			if u := binary.LittleEndian.Uint32(b[i:]); u>>23&0xff == 0xff {
				return i / 4, math.Float32frombits(u)
			}
		}
	case safetensors.BF16:
		for i := 0; i+2 <= len(b); i += 2 {
			if u := binary.LittleEndian.Uint16(b[i:]); u>>7&0xff == 0xff {
				return i / 2, math.Float32frombits(uint32(u) << 16)
			}
		}
	case safetensors.F16:
		for i := 0; i+2 <= len(b); i += 2 {
			if u := binary.LittleEndian.Uint16(b[i:]); u>>10&0x1f == 0x1f {
				return i / 2, safetensors.F16ToFloat32(u)
			}
		}
	}
	return -1, 0
}

// decoderType is the model_type of m's family, whose names PEFT's
// adapters use; an error for a model without PEFT's layout here.
func decoderType(m models.Model) (string, error) {
	l, ok := m.(*models.Decoder)
	if !ok {
		return "", fmt.Errorf("hf: PEFT adapters are read for the decoder families, not a %T", m)
	}
	mt := l.Config.Arch.Family
	if mt == "" {
		mt = "llama"
	}
	if !HasPEFTLayout(mt) {
		return "", fmt.Errorf("hf: a %s decoder has no Hugging Face layout", mt)
	}
	return mt, nil
}

// LoadPEFT attaches to m the LoRA adapters PEFT saved in dir
// (adapter_config.json, read by ReadPEFTConfig, and
// adapter_model.safetensors) and fills them with the file's values: an
// adapter of rank r, scale Scale() and dropout lora_dropout (or
// o.Dropout) on every Linear layer that has a lora_A and lora_B, as
// nn.Linear.AttachLoRA attaches lora.Apply's, in o.DType. Tensors are
// named as the module's family names them (PEFTName), with or without
// base_model.model., as <module>.lora_A.weight or older PEFT's
// <module>.lora_A.default.weight; F32, BF16 or F16.
//
// Everything is checked against the header and m before any adapter is
// made, so an error leaves m as it was and no size comes from the file
// unchecked: a tensor whose module is not a Linear layer of m, a shape
// other than [r, in] for lora_A and [out, r] for lora_B, a lora_A
// without its lora_B, a NaN or infinity, target_modules that choose no
// layer of m, a tensor of a module they do not choose, or a module they
// choose without tensors is an error naming the file and the tensor or
// key. base_model_name_or_path is not checked: m must be the base the
// adapters were trained on. The base is not frozen (lora.Adopt freezes
// it for training).
func LoadPEFT(m models.Model, dir string, o PEFTOptions) (*PEFTAdapters, error) {
	mt, err := decoderType(m)
	if err != nil {
		return nil, err
	}
	c, err := ReadPEFTConfig(dir)
	if err != nil {
		return nil, err
	}
	cpath, wpath := filepath.Join(dir, peftConfig), filepath.Join(dir, peftWeights)
	if _, err := os.Lstat(wpath); errors.Is(err, fs.ErrNotExist) {
		why := ""
		if _, err := os.Lstat(filepath.Join(dir, "adapter_model.bin")); err == nil {
			why = " (adapter_model.bin, PyTorch's pickle, is not read: save the adapters with safe_serialization=True)"
		}
		return nil, fmt.Errorf("hf: %s: no such file beside %s%s", wpath, peftConfig, why)
	}
	st, err := safetensors.Open(wpath)
	if err != nil {
		return nil, fmt.Errorf("hf: %v", err)
	}
	defer st.Close()

	// The model's Linear layers by their PEFT names, in model order, and
	// the modules of its other parameters, to say what a tensor's module
	// is when it is not one of those layers.
	layers := map[string]*nn.Linear{}
	var order []string
	err = nn.Walk(m, func(x nn.Module) error {
		l, ok := x.(*nn.Linear)
		if !ok {
			return nil
		}
		name, ok := PEFTName(mt, l.Weight.Name())
		if !ok {
			return fmt.Errorf("hf: layer %s has no name in %s's layout", l.Weight.Name(), mt)
		}
		if layers[name] == nil {
			layers[name] = l
			order = append(order, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	others := map[string]bool{}
	for _, p := range m.Parameters() {
		if name, ok := PEFTName(mt, p.Name()); ok && layers[name] == nil {
			others[name] = true
		}
	}
	if c.targets.set && !slices.ContainsFunc(order, c.chooses) {
		return nil, fmt.Errorf("hf: %s: target_modules %s choose no Linear layer of this %s (its layers are named as %s)",
			cpath, quoteJSON(c.targetsJSON()), mt, strings.Join(order[:min(3, len(order))], ", "))
	}

	type pair struct{ a, b safetensors.Tensor }
	pairs := map[string]*pair{}
	for _, n := range st.Names() {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("hf: %s: tensor %s: %s", wpath, n, fmt.Sprintf(format, args...))
		}
		module, which, err := peftKey(n)
		if err != nil {
			return nil, bad("%v", err)
		}
		l := layers[module]
		switch {
		case module == "lm_head":
			return nil, bad("the LM head is not a layer memfit adapts (the chunked loss reads its weight directly)")
		case l == nil && others[module]:
			return nil, bad("%s is not a Linear layer memfit adapts (its LoRA adapts the blocks' projections)", module)
		case l == nil:
			return nil, bad("this %s has no module %s", mt, module)
		case c.targets.set && !c.chooses(module):
			return nil, bad("%s is not among %s's target_modules %s", module, cpath, quoteJSON(c.targetsJSON()))
		}
		t, _ := st.Tensor(n)
		switch t.DType {
		case safetensors.F32, safetensors.BF16, safetensors.F16:
		default:
			return nil, bad("dtype %s: memfit reads adapters in F32, BF16 or F16", t.DType)
		}
		out, in := l.Weight.Shape()[0], l.Weight.Shape()[1]
		want := []int{c.Rank, in}
		if which == "lora_B" {
			want = []int{out, c.Rank}
		}
		if !slices.Equal(t.Shape, want) {
			return nil, bad("shape %v, want %v (r %d of %s; layer %s is %d → %d)", t.Shape, want, c.Rank, cpath, module, in, out)
		}
		if i, v := nonFinite(t.DType, t.Data); i >= 0 {
			return nil, bad("element %d is %v", i, v)
		}
		p := pairs[module]
		if p == nil {
			p = &pair{}
			pairs[module] = p
		}
		slot := &p.a
		if which == "lora_B" {
			slot = &p.b
		}
		if slot.Data != nil {
			return nil, bad("a second %s of %s (one named with .default., one without?)", which, module)
		}
		*slot = t
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("hf: %s: no LoRA adapter tensors", wpath)
	}
	var adapted []string
	for _, module := range order {
		p := pairs[module]
		switch {
		case p == nil && c.chooses(module):
			return nil, fmt.Errorf("hf: %s: target_modules choose %s, but %s holds no lora_A or lora_B for it", cpath, module, wpath)
		case p == nil:
		case layers[module].Adapter != nil:
			return nil, fmt.Errorf("hf: %s: layer %s has an adapter already", wpath, module)
		case p.b.Data == nil:
			return nil, fmt.Errorf("hf: %s: %s has a lora_A but no lora_B", wpath, module)
		case p.a.Data == nil:
			return nil, fmt.Errorf("hf: %s: %s has a lora_B but no lora_A", wpath, module)
		default:
			adapted = append(adapted, module)
		}
	}

	// Checked: attach and fill, undoing every adapter on an error (the
	// device's: out of memory).
	dropout := c.Dropout
	if o.Dropout != nil {
		dropout = *o.Dropout
	}
	var done []*nn.Linear
	undo := func() {
		for _, l := range done {
			l.Adapter.A.Release()
			l.Adapter.B.Release()
			l.Adapter = nil
		}
	}
	ad := &PEFTAdapters{PEFTConfig: c}
	for _, module := range adapted {
		l := layers[module]
		if err := l.AttachLoRA(nn.LoRAConfig{Rank: c.Rank, Alpha: c.Alpha, Dropout: dropout, DType: o.DType}); err != nil {
			undo()
			return nil, fmt.Errorf("hf: %s: %v", module, err)
		}
		done = append(done, l)
		// AttachLoRA's scale is Alpha/Rank; rank-stabilized adapters
		// take Alpha/√Rank.
		l.Adapter.Scale = c.Scale()
		p := pairs[module]
		for _, f := range []struct {
			dst *tensor.Tensor
			src safetensors.Tensor
		}{{l.Adapter.A, p.a}, {l.Adapter.B, p.b}} {
			err := tensor.Catch(func() error {
				v, err := f.src.Float32s()
				if err != nil {
					return err
				}
				return f.dst.SetFloat32s(v)
			})
			if err != nil {
				undo()
				return nil, fmt.Errorf("hf: %s: %s: %v", wpath, module, err)
			}
		}
		ad.Layers = append(ad.Layers, strings.TrimSuffix(l.Weight.Name(), ".weight"))
	}
	return ad, nil
}

// targetsJSON is target_modules as the file gave them, for messages.
func (c PEFTConfig) targetsJSON() any {
	switch {
	case c.targets.all:
		return "all-linear"
	case c.targets.re != nil:
		s := c.targets.re.String()
		return s[len(`^(?:`) : len(s)-len(`)$`)]
	}
	return c.targets.names
}
