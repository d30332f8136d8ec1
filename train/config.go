package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/optim"
)

// Config holds every knob of a training run. The zero value is not
// useful: start from Default and change fields. Field names and JSON
// keys are stable (the -summary file embeds the resolved Config).
type Config struct {
	// Model
	Model   string  `json:"model"`   // a registered model: mlp, cnn, gpt or llama
	Layers  int     `json:"layers"`  // hidden layers (mlp), blocks (gpt, llama)
	Width   int     `json:"width"`   // hidden width (mlp), model dimension (gpt, llama), channels (cnn)
	Heads   int     `json:"heads"`   // attention heads (gpt, llama)
	Context int     `json:"context"` // tokens per sequence (gpt, llama)
	Dropout float64 `json:"dropout"`
	// KVHeads and Hidden are llama's key/value heads (grouped-query
	// attention; 0: Heads) and SwiGLU width (0: 8/3·Width).
	KVHeads int `json:"kv_heads,omitempty"`
	Hidden  int `json:"hidden,omitempty"`

	// Data
	Data     string  `json:"data"` // path; "" is the embedded synthetic task
	Workers  int     `json:"workers"`
	Prefetch int     `json:"prefetch"`
	ValSplit float64 `json:"val_split"`

	// Schedule
	Steps    int     `json:"steps"`  // optimizer steps; 0: use Epochs
	Epochs   int     `json:"epochs"` // used when Steps is 0
	Batch    int     `json:"batch"`
	LR       float64 `json:"lr"`    // 0: the model's default (see Resolved)
	Optim    string  `json:"optim"` // a registered optimizer: sgd, adam, adamw, adam8bit, adamw8bit, adafactor
	WD       float64 `json:"wd"`
	Clip     float64 `json:"clip"`     // max global gradient norm; 0: off
	Warmup   int     `json:"warmup"`   // linear warm-up steps
	Schedule string  `json:"schedule"` // const or cosine
	Seed     uint64  `json:"seed"`

	// Memory
	AMP        string   `json:"amp"`        // off, fp16 or bf16
	Accum      int      `json:"accum"`      // micro-batches per optimizer step
	Checkpoint string   `json:"checkpoint"` // off, every, sqrt, N (segments) or a byte budget
	LMHead     string   `json:"lm_head"`    // token tasks: chunked (head and loss over chunks of rows) or full (whole logits)
	Freeze     []string `json:"freeze"`     // parameter path patterns
	// LoRA is the rank of low-rank adapters (package lora; 0: none) on
	// the Linear layers LoRATargets match (none: every Linear layer),
	// scaled by LoRAAlpha/LoRA (0: 1), with LoRADropout on their input.
	// Every other parameter is frozen, and held in 16 bits under -amp.
	LoRA        int      `json:"lora,omitempty"`
	LoRAAlpha   float64  `json:"lora_alpha,omitempty"`
	LoRADropout float64  `json:"lora_dropout,omitempty"`
	LoRATargets []string `json:"lora_targets,omitempty"`
	// Weights is the parameters' dtype: f32, or bf16 (no F32 master copy;
	// updates computed in F32 and rounded stochastically, seeded).
	Weights string `json:"weights,omitempty"`
	// StepInBackward applies each parameter's optimizer update as soon as
	// its gradient is final during backward, and frees the gradient at
	// once (stepbw.go).
	StepInBackward bool `json:"step_in_backward,omitempty"`
	UnfreezeAt     int  `json:"unfreeze_at"` // step at which frozen parameters train again; 0: never
	// Offload keeps state in host memory (package offload): "off" (or
	// empty), "activations" (what autograd saves moves to the host and
	// back for backward), "optimizer" (master weights and optimizer state
	// on the host, the update computed there, overlapping backward where
	// it may: see overlapsOffload) or "all" (both).
	Offload string `json:"offload,omitempty"`
	// OffloadPrefetch is how many blocks' activations backward brings
	// back ahead of the block it differentiates (with -offload
	// activations). On the CPU device a goroutine copies them while
	// backward goes on; elsewhere copies complete before they return.
	// Either way it gains little on the CPU (BENCHMARKS.md), and 0 (the
	// default) gives the lowest peak; each block of window adds one
	// block's activations to it.
	OffloadPrefetch int    `json:"offload_prefetch,omitempty"`
	Device          string `json:"device"` // a registered device: cpu, or cuda in a build with the cuda tag
	// Without names device capabilities to hide (device.Capabilities):
	// their composed fallbacks run instead, for comparison or to take a
	// fused kernel out of a run.
	Without  []string `json:"without,omitempty"`
	MemLimit int64    `json:"mem_limit"` // device capacity in bytes; 0: the device's own (cpu: cpu.DefaultCapacity)

	// Data parallelism
	Dist string `json:"dist"` // off, or mpi: one rank per process under mpirun
	Zero int    `json:"zero"` // ZeRO stage: 0 (replicated optimizer), 1 (state sharded), 2 (gradients too) or 3 (parameters too)
	// ZeroPrefetch starts each block's gather under -zero 3 while the
	// block before it computes (parallel.ZeRO3Config.Prefetch): the
	// collectives overlap computation, at the cost of one more block's
	// parameters at the peak.
	ZeroPrefetch bool `json:"zero_prefetch,omitempty"`
	// Ranks is the number of ranks -plan and -fit plan one rank of, with
	// -dist (0: plan one process, unsharded). Training takes the rank
	// count from the engine (mpirun -np).
	Ranks int `json:"ranks,omitempty"`

	// Output
	EvalEvery int    `json:"eval_every"`
	Metrics   string `json:"metrics"`
	MemReport string `json:"mem_report"`
	Summary   string `json:"summary"`
	Save      string `json:"save"`
	SaveEvery int    `json:"save_every"`
	Resume    string `json:"resume"`
	Quiet     bool   `json:"quiet"`

	// LMHeadChunkRows is the rows (tokens) per chunk of the chunked
	// head; 0 chooses them from tensor.LMHeadChunkBytes. Library only; no
	// flag.
	LMHeadChunkRows int `json:"lm_head_chunk_rows"`

	// SkipNonFinite skips a step whose loss is NaN or infinite (counting
	// it) instead of stopping with an error. Library only; no flag.
	SkipNonFinite bool `json:"skip_non_finite"`

	// Planning
	Plan bool  `json:"plan"`
	Fit  int64 `json:"fit"` // budget in bytes; 0: off

	// Init starts from a pretrained model instead of random weights: a
	// Hugging Face GPT-2 or Llama checkpoint (a directory with config.json
	// and model.safetensors or its shards, or a .safetensors file). The
	// model, its shape and vocabulary come from it (ApplyInit).
	Init string `json:"init,omitempty"`
	// Tokenizer turns a text -data file into tokens (a file or directory
	// tokenizer.Open reads: GPT-2's byte-level BPE); the model's vocabulary
	// follows it. Empty: a text file is bytes. -init's directory provides
	// one when it holds tokenizer files.
	Tokenizer string `json:"tokenizer,omitempty"`
	// SaveFormat is what -save writes: "memfit" (the default: weights,
	// optimizer and loop state in one file, resumable) or "hf" (the
	// model's weights in Hugging Face's GPT-2 or Llama layout, a
	// directory with config.json and model.safetensors; not resumable).
	SaveFormat string `json:"save_format,omitempty"`
	// Vocab, when set, is a token model's vocabulary (else the data's).
	Vocab int `json:"vocab,omitempty"`

	// Generation (token models): instead of training, continue Prompt by
	// Generate tokens (after -resume) and print them. Temperature 0 is
	// greedy decoding; TopK 0 and TopP 0 keep every token; Seed seeds
	// the sampling.
	Generate    int     `json:"generate,omitempty"`
	Prompt      string  `json:"prompt,omitempty"`
	Temperature float64 `json:"temperature,omitempty"`
	TopK        int     `json:"top_k,omitempty"`
	TopP        float64 `json:"top_p,omitempty"`
}

// Default is the configuration of a bare `train` command: the reference
// MLP (784-1024-1024-1024-10 on Fashion-MNIST: 3 hidden layers of 1024,
// Adam 1e-3, batch 256, one epoch), here on the embedded synthetic task,
// where it learns visibly in well under a minute on two cores.
func Default() Config {
	return Config{
		Model: "mlp", Layers: 3, Width: 1024, Heads: 4, Context: 64,
		Workers: 2, Prefetch: 2, ValSplit: 0.1,
		Epochs: 1, Batch: 256, Optim: "adam", Schedule: "const", Seed: 1,
		AMP: "off", Accum: 1, Checkpoint: "off", LMHead: "chunked", Device: "cpu",
		Dist: "off", EvalEvery: 100,
	}
}

// Model defaults for fields left at zero.
const (
	DefaultLRMLP = 1e-3
	DefaultLRCNN = 2e-3
	DefaultLRGPT = 3e-4
	// DefaultLRAdafactor is -optim adafactor's: its learning rate is the
	// ceiling of the relative step size ρ = min(lr, 1/√t), which the
	// paper sets to 10⁻² whatever the model (optim.Adafactor).
	DefaultLRAdafactor = 1e-2
)

// Resolved fills the fields whose defaults depend on the model: a zero LR
// becomes the model's (1e-3 mlp, 2e-3 cnn, 3e-4 gpt; 1e-2, the paper's
// relative-step ceiling, with -optim adafactor; llama takes gpt's); an empty LMHead (a
// Config from before it existed) is chunked.
func (c Config) Resolved() Config {
	if c.LMHead == "" {
		c.LMHead = "chunked"
	}
	if c.LR == 0 && c.Optim == "adafactor" {
		c.LR = DefaultLRAdafactor
	}
	if c.LR == 0 {
		switch c.Model {
		case "cnn":
			c.LR = DefaultLRCNN
		case "gpt", "llama":
			c.LR = DefaultLRGPT
		default:
			c.LR = DefaultLRMLP
		}
	}
	return c
}

// Validate checks every field a user sets and names the first bad one.
func (c *Config) Validate() error {
	bad := func(flag string, v any, want string) error {
		return fmt.Errorf("-%s %v: %s", flag, v, want)
	}
	if !slices.Contains(models.Names(), c.Model) {
		return bad("model", c.Model, "unknown model (want "+orList(models.Names())+")")
	}
	switch {
	case c.Layers < 1:
		return bad("layers", c.Layers, "want at least 1")
	case c.Width < 1:
		return bad("width", c.Width, "want at least 1")
	case c.Heads < 1:
		return bad("heads", c.Heads, "want at least 1")
	case tokenModel(c.Model) && c.Width%c.Heads != 0:
		return bad("heads", c.Heads, fmt.Sprintf("must divide -width %d", c.Width))
	case c.KVHeads < 0 || (c.KVHeads > 0 && c.Heads%c.KVHeads != 0):
		return bad("kv-heads", c.KVHeads, fmt.Sprintf("must divide -heads %d (0: as many as -heads)", c.Heads))
	case c.Hidden < 0:
		return bad("hidden", c.Hidden, "want 0 (8/3 of -width) or more")
	case c.Context < 1:
		return bad("context", c.Context, "want at least 1")
	case !(c.Dropout >= 0 && c.Dropout < 1): // NaN fails every comparison
		return bad("dropout", c.Dropout, "want a probability in [0, 1)")
	case c.Workers < 0:
		return bad("workers", c.Workers, "want 0 or more")
	case c.Prefetch < 0:
		return bad("prefetch", c.Prefetch, "want 0 or more")
	case !(c.ValSplit >= 0 && c.ValSplit < 1):
		return bad("val-split", c.ValSplit, "want a fraction in [0, 1)")
	case c.Steps < 0:
		return bad("steps", c.Steps, "want 0 or more")
	case c.Steps == 0 && c.Epochs < 1:
		return bad("epochs", c.Epochs, "want at least 1 when -steps is 0")
	case c.Batch < 1:
		return bad("batch", c.Batch, "want at least 1")
	case !(c.LR >= 0) || math.IsInf(c.LR, 1):
		return bad("lr", c.LR, "want a positive learning rate (0: the model's default)")
	case !(c.WD >= 0):
		return bad("wd", c.WD, "want 0 or more")
	case !(c.Clip >= 0):
		return bad("clip", c.Clip, "want 0 (off) or more")
	case c.Warmup < 0:
		return bad("warmup", c.Warmup, "want 0 or more")
	case c.Accum < 1:
		return bad("accum", c.Accum, "want at least 1 micro-batch")
	case c.Accum > c.Batch:
		return bad("accum", c.Accum, fmt.Sprintf("more micro-batches than -batch %d examples", c.Batch))
	case c.UnfreezeAt < 0:
		return bad("unfreeze-at", c.UnfreezeAt, "want 0 (never) or a step")
	case c.MemLimit < 0:
		return bad("mem-limit", c.MemLimit, "want a size such as 512MiB")
	case c.EvalEvery < 0:
		return bad("eval-every", c.EvalEvery, "want 0 (off) or more")
	case c.SaveEvery < 0:
		return bad("save-every", c.SaveEvery, "want 0 (off) or more")
	case c.Fit < 0:
		return bad("fit", c.Fit, "want a size such as 512MiB")
	}
	if !slices.Contains(optim.Names(), c.Optim) {
		return bad("optim", c.Optim, "unknown optimizer (want "+orList(optim.Names())+")")
	}
	switch c.Schedule {
	case "const", "cosine":
	default:
		return bad("schedule", c.Schedule, "unknown schedule (want const or cosine)")
	}
	switch c.AMP {
	case "off", "bf16", "fp16":
	default:
		return bad("amp", c.AMP, "unknown mode (want off, fp16 or bf16)")
	}
	switch c.LMHead {
	case "chunked", "full":
	default:
		return bad("lm-head", c.LMHead, "unknown head (want chunked or full)")
	}
	switch c.SaveFormat {
	case "", "memfit":
	case "hf":
		if !tokenModel(c.Model) {
			return bad("save-format", c.SaveFormat, "Hugging Face's layout is written for -model gpt (GPT-2) and -model llama")
		}
	default:
		return bad("save-format", c.SaveFormat, "unknown format (want memfit or hf)")
	}
	switch c.Weights {
	case "", "f32":
	case "bf16":
		switch {
		case c.Model == "cnn":
			return bad("weights", c.Weights, "the cnn keeps f32 parameters (mlp and gpt take bf16)")
		case c.Zero == 3:
			return bad("weights", c.Weights, "not with -zero 3 yet (its flat parameter storage is f32; -zero 1 and 2 shard bf16 parameters)")
		}
	default:
		return bad("weights", c.Weights, "unknown dtype (want f32 or bf16)")
	}
	if c.StepInBackward {
		// Each refusal is an update that needs every gradient first.
		switch {
		case c.Accum > 1:
			return bad("step-in-backward", true, "conflicts with -accum "+strconv.Itoa(c.Accum)+": the update must wait for the last micro-batch's gradients (use -accum 1, or train without -step-in-backward)")
		case c.AMP == "fp16":
			return bad("step-in-backward", true, "conflicts with -amp fp16: loss scaling skips a step when any gradient overflows, which is known only after the whole backward (use -amp bf16)")
		case c.Clip > 0:
			return bad("step-in-backward", true, "conflicts with -clip: clipping by the global norm needs every gradient first")
		case c.Dist != "off":
			return bad("step-in-backward", true, "conflicts with -dist: gradients are averaged over the ranks before any update")
		}
	}
	switch {
	case c.Generate < 0:
		return bad("generate", strconv.Itoa(c.Generate), "want a number of tokens, or 0 to train")
	case c.Generate > 0 && !tokenModel(c.Model):
		return bad("generate", strconv.Itoa(c.Generate), "generation needs a token model (-model gpt or llama)")
	case c.Generate > 0 && c.Prompt == "":
		return bad("generate", strconv.Itoa(c.Generate), "needs -prompt (the text to continue)")
	case c.Temperature < 0 || math.IsNaN(c.Temperature):
		return bad("temperature", fmt.Sprint(c.Temperature), "want 0 (greedy) or more")
	case c.TopK < 0:
		return bad("top-k", strconv.Itoa(c.TopK), "want 0 (all tokens) or more")
	case c.TopP < 0 || c.TopP > 1 || math.IsNaN(c.TopP):
		return bad("top-p", fmt.Sprint(c.TopP), "want 0 < top-p <= 1 (0: all tokens)")
	}
	if !slices.Contains(device.Names(), c.Device) {
		return bad("device", c.Device, "unknown device (want "+orList(device.Names())+"; cuda needs a program that imports device/cuda, as cmd/train does)")
	}
	for _, w := range c.Without {
		if !slices.Contains(device.Capabilities, w) {
			return bad("without", w, "unknown capability (want "+orList(device.Capabilities)+")")
		}
	}
	switch c.Dist {
	case "off", "mpi":
	default:
		return bad("dist", c.Dist, "unknown engine (want off or mpi)")
	}
	switch {
	case c.Zero < 0 || c.Zero > 3:
		return bad("zero", c.Zero, "want 0, 1 (optimizer state sharded), 2 (gradients too) or 3 (parameters too)")
	case c.Ranks < 0:
		return bad("ranks", c.Ranks, "want a number of ranks to plan for, or 0")
	case c.Ranks > 0 && c.Dist == "off":
		return bad("ranks", c.Ranks, "plans one rank of -dist; add -dist mpi")
	case c.Zero > 0 && c.UnfreezeAt > 0:
		return bad("zero", c.Zero, "cannot be combined with -unfreeze-at (the shards are cut once, from the trainable parameters)")
	case c.ZeroPrefetch && c.Zero != 3:
		return bad("zero-prefetch", c.ZeroPrefetch, "prefetches the parameter gathers of -zero 3; add -zero 3")
	case c.Zero == 3 && c.Optim == "adafactor":
		return bad("zero", c.Zero, "cannot shard -optim adafactor by element ranges (its row and column statistics span whole matrices): use -zero 1 or 2, which give each rank whole tensors")
	}
	if _, err := ParseCheckpoint(c.Checkpoint); err != nil {
		return err
	}
	if err := c.validateOffload(); err != nil {
		return err
	}
	if c.UnfreezeAt > 0 && len(c.Freeze) == 0 {
		return bad("unfreeze-at", c.UnfreezeAt, "nothing is frozen (set -freeze)")
	}
	return c.validateLoRA(bad)
}

// validateLoRA checks the -lora flags.
func (c *Config) validateLoRA(bad func(flag string, v any, want string) error) error {
	if c.LoRA == 0 {
		switch {
		case c.LoRAAlpha != 0:
			return bad("lora-alpha", c.LoRAAlpha, "needs -lora (the adapters' rank)")
		case c.LoRADropout != 0:
			return bad("lora-dropout", c.LoRADropout, "needs -lora (the adapters' rank)")
		case len(c.LoRATargets) > 0:
			return bad("lora-targets", strings.Join(c.LoRATargets, ","), "needs -lora (the adapters' rank)")
		}
		return nil
	}
	switch {
	case c.LoRA < 0:
		return bad("lora", c.LoRA, "want a rank of 1 or more (0: no adapters)")
	case !(c.LoRAAlpha >= 0) || math.IsInf(c.LoRAAlpha, 1):
		return bad("lora-alpha", c.LoRAAlpha, "want 0 (the rank: a scale of 1) or more")
	case !(c.LoRADropout >= 0 && c.LoRADropout < 1):
		return bad("lora-dropout", c.LoRADropout, "want a probability in [0, 1)")
	case len(c.Freeze) > 0:
		return bad("freeze", strings.Join(c.Freeze, ","), "conflicts with -lora, which freezes every parameter but the adapters")
	case c.UnfreezeAt > 0:
		return bad("unfreeze-at", c.UnfreezeAt, "conflicts with -lora, whose base stays frozen")
	}
	return nil
}

// CheckpointSpec is a parsed -checkpoint value.
type CheckpointSpec struct {
	Kind     string // off, every, sqrt, segments or budget
	Segments int
	Budget   int64
}

// ParseCheckpoint reads off, every, sqrt, a segment count or a byte budget
// (a size with a unit, e.g. 300MiB).
func ParseCheckpoint(s string) (CheckpointSpec, error) {
	switch strings.ToLower(s) {
	case "", "off":
		return CheckpointSpec{Kind: "off"}, nil
	case "every":
		return CheckpointSpec{Kind: "every"}, nil
	case "sqrt":
		return CheckpointSpec{Kind: "sqrt"}, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 {
			return CheckpointSpec{}, fmt.Errorf("-checkpoint %s: want at least 1 segment", s)
		}
		return CheckpointSpec{Kind: "segments", Segments: n}, nil
	}
	b, err := memory.ParseBytes(s)
	if err != nil || b <= 0 {
		return CheckpointSpec{}, fmt.Errorf("-checkpoint %s: want off, every, sqrt, a segment count or a memory budget such as 300MiB", s)
	}
	return CheckpointSpec{Kind: "budget", Budget: b}, nil
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// tokenModel reports whether a registered model takes token sequences.
func tokenModel(name string) bool { return name == "gpt" || name == "llama" }

// ApplyInit takes the model from Init's checkpoint: -model gpt for a
// GPT-2, llama for a Llama (hf.Architecture), with its layers, heads
// (and a Llama's key/value heads and MLP width), width and vocabulary,
// and its context (a GPT-2's; for a Llama, -context up to the model's
// max_position_embeddings). It returns a note when the checkpoint has no config.json
// and the shape was inferred. Without Init it changes nothing.
func (c Config) ApplyInit() (Config, string, error) {
	if c.Init == "" {
		return c, "", nil
	}
	ck, err := hf.Open(c.Init)
	if err != nil {
		return c, "", fmt.Errorf("-init %s: %v", c.Init, err)
	}
	defer ck.Close()
	arch, err := hf.Architecture(ck)
	if err != nil {
		return c, "", fmt.Errorf("-init %s: %v", c.Init, err)
	}
	model := map[string]string{"gpt2": "gpt", "llama": "llama"}[arch]
	if c.Model != model && c.Model != "" && c.Model != Default().Model {
		return c, "", fmt.Errorf("-init %s: a %s checkpoint, which -model %s is not (it is -model %s)", c.Init, arch, c.Model, model)
	}
	var note string
	switch arch {
	case "llama":
		h, n, err := hf.ReadLlamaConfig(ck)
		if err != nil {
			return c, "", fmt.Errorf("-init %s: %v", c.Init, err)
		}
		// A Llama has no position table: its max_position_embeddings
		// (131072 for Llama 3.1) only bounds the sequence, so the run's
		// windows stay -context long, at most that.
		c.Layers, c.Heads, c.KVHeads, c.Width, c.Hidden, c.Context, c.Vocab = h.Layers, h.Heads, h.KVHeads, h.Dim, h.Hidden, min(c.Context, h.Positions), h.Vocab
		note = n
	default:
		h, n, err := hf.ReadGPT2Config(ck)
		if err != nil {
			return c, "", fmt.Errorf("-init %s: %v", c.Init, err)
		}
		c.Layers, c.Heads, c.Width, c.Context, c.Vocab = h.Layers, h.Heads, h.Dim, h.Positions, h.Vocab
		note = n
	}
	c.Model = model
	if c.Tokenizer == "" {
		if st, err := os.Stat(c.Init); err == nil && st.IsDir() {
			for _, f := range []string{"tokenizer.json", "encoder.json", "vocab.json"} {
				if _, err := os.Stat(filepath.Join(c.Init, f)); err == nil {
					c.Tokenizer = c.Init
					break
				}
			}
		}
	}
	return c, note, nil
}

// OffloadsActivations reports whether -offload moves activations.
func (c Config) OffloadsActivations() bool { return c.Offload == "activations" || c.Offload == "all" }

// OffloadsOptimizer reports whether -offload moves the optimizer.
func (c Config) OffloadsOptimizer() bool { return c.Offload == "optimizer" || c.Offload == "all" }

// validateOffload checks -offload and what it cannot be combined with.
func (c Config) validateOffload() error {
	bad := func(v any, want string) error { return fmt.Errorf("-offload %v: %s", v, want) }
	switch c.Offload {
	case "", "off", "activations", "optimizer", "all":
	default:
		return bad(c.Offload, "unknown (want off, activations, optimizer or all)")
	}
	if c.OffloadPrefetch < 0 {
		return fmt.Errorf("-offload-prefetch %d: want 0 or more blocks", c.OffloadPrefetch)
	}
	if !c.OffloadsOptimizer() {
		return nil
	}
	// The host optimizer is built over host copies of the trainable
	// parameters, once: what changes that set, shards it or updates on
	// the device is refused rather than half supported.
	switch {
	case c.StepInBackward:
		return bad(c.Offload, "conflicts with -step-in-backward (the update runs on the host after backward)")
	case c.Dist != "off":
		return bad(c.Offload, "the optimizer is not offloaded under -dist yet (use -zero to shard it, or -offload activations)")
	case len(c.Freeze) > 0:
		return bad(c.Offload, "the optimizer is not offloaded with -freeze yet (use -offload activations)")
	case c.Weights == "bf16":
		return bad(c.Offload, "the optimizer is not offloaded with -weights bf16 yet (use -offload activations)")
	}
	return nil
}
