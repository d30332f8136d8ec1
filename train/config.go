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

// Config holds every knob of a training run, grouped by concern. The zero
// value is not useful: start from Default and change fields. Field names
// and JSON keys are stable (the -summary file and every checkpoint embed
// the resolved Config); the flat layout of earlier versions is still read
// (legacy.go).
type Config struct {
	Model     ModelConfig     `json:"model"`
	Data      DataConfig      `json:"data"`
	Optim     OptimConfig     `json:"optim"`
	Precision PrecisionConfig `json:"precision"`
	Memory    MemoryConfig    `json:"memory"`
	Device    DeviceConfig    `json:"device"`
	Parallel  ParallelConfig  `json:"parallel"`
	Output    OutputConfig    `json:"output"`
	Generate  GenerateConfig  `json:"generate"`
	// Seed seeds the weights, the data order, dropout and sampling.
	Seed uint64 `json:"seed"`
	// Plan prints the predicted peak memory by category instead of
	// training; Fit (bytes; 0: off) chooses techniques so that the run
	// fits that budget.
	Plan bool  `json:"plan"`
	Fit  int64 `json:"fit"`
}

// ModelConfig is the model a run trains: a registered model built from
// its shape, or one imported from Init.
type ModelConfig struct {
	Name    string  `json:"name"`    // a registered model: mlp, cnn, gpt or llama
	Layers  int     `json:"layers"`  // hidden layers (mlp), blocks (gpt, llama)
	Width   int     `json:"width"`   // hidden width (mlp), model dimension (gpt, llama), channels (cnn)
	Heads   int     `json:"heads"`   // attention heads (token models)
	Context int     `json:"context"` // tokens per sequence (token models)
	Dropout float64 `json:"dropout"`
	// KVHeads and Hidden are llama's key/value heads (grouped-query
	// attention; 0: Heads) and SwiGLU width (0: 8/3·Width).
	KVHeads int `json:"kv_heads,omitempty"`
	Hidden  int `json:"hidden,omitempty"`
	// Vocab, when set, is a token model's vocabulary (else the data's).
	Vocab int `json:"vocab,omitempty"`
	// Init starts from a pretrained model instead of random weights: a
	// Hugging Face checkpoint (a directory with config.json and
	// model.safetensors or its shards, or a .safetensors file). The
	// model, its shape and vocabulary come from it (ApplyInit).
	Init string `json:"init,omitempty"`
}

// DataConfig is what the run learns from and how it is loaded.
type DataConfig struct {
	Path string `json:"path"` // "" is the embedded synthetic task
	// Tokenizer turns a text Path into tokens (a file or directory
	// tokenizer.Open reads); the model's vocabulary follows it. Empty: a
	// text file is bytes. Init's directory provides one when it holds
	// tokenizer files.
	Tokenizer string  `json:"tokenizer,omitempty"`
	Workers   int     `json:"workers"`
	Prefetch  int     `json:"prefetch"`
	ValSplit  float64 `json:"val_split"`
}

// OptimConfig is the optimization: how long, on what batches, with which
// optimizer and schedule.
type OptimConfig struct {
	Steps    int     `json:"steps"`  // optimizer steps; 0: use Epochs
	Epochs   int     `json:"epochs"` // used when Steps is 0
	Batch    int     `json:"batch"`
	LR       float64 `json:"lr"`   // 0: the model's default (see Resolved)
	Name     string  `json:"name"` // a registered optimizer: sgd, adam, adamw, adam8bit, adamw8bit, adafactor
	WD       float64 `json:"wd"`
	Clip     float64 `json:"clip"`     // max global gradient norm; 0: off
	Warmup   int     `json:"warmup"`   // linear warm-up steps
	Schedule string  `json:"schedule"` // const or cosine
	// SkipNonFinite skips a step whose loss is NaN or infinite (counting
	// it) instead of stopping with an error. Library only; no flag.
	SkipNonFinite bool `json:"skip_non_finite"`
}

// PrecisionConfig is the dtypes a run computes and stores in.
type PrecisionConfig struct {
	AMP string `json:"amp"` // off, fp16 or bf16
	// Weights is the parameters' dtype: f32, or bf16 (no F32 master copy;
	// updates computed in F32 and rounded stochastically, seeded).
	Weights string `json:"weights,omitempty"`
}

// MemoryConfig holds the memory techniques' options.
type MemoryConfig struct {
	Accum      int    `json:"accum"`      // micro-batches per optimizer step
	Checkpoint string `json:"checkpoint"` // off, every, sqrt, N (segments) or a byte budget
	// LMHead is how token tasks compute their head and loss: chunked
	// (over chunks of rows) or full (whole logits). LMHeadChunkRows is
	// the rows (tokens) per chunk; 0 chooses them from
	// tensor.LMHeadChunkBytes (library only; no flag).
	LMHead          string      `json:"lm_head"`
	LMHeadChunkRows int         `json:"lm_head_chunk_rows"`
	Freeze          []string    `json:"freeze"`      // parameter path patterns
	UnfreezeAt      int         `json:"unfreeze_at"` // step at which frozen parameters train again; 0: never
	LoRA            LoRAOptions `json:"lora"`
	// StepInBackward applies each parameter's optimizer update as soon as
	// its gradient is final during backward, and frees the gradient at
	// once (stepbw.go).
	StepInBackward bool           `json:"step_in_backward,omitempty"`
	Offload        OffloadOptions `json:"offload"`
}

// LoRAOptions are the low-rank adapters' (package lora): Rank 0 is none;
// on the Linear layers Targets match (none: every Linear layer), scaled
// by Alpha/Rank (0: 1), with Dropout on their input. Every other
// parameter is frozen, and held in 16 bits under -amp.
type LoRAOptions struct {
	Rank    int      `json:"rank,omitempty"`
	Alpha   float64  `json:"alpha,omitempty"`
	Dropout float64  `json:"dropout,omitempty"`
	Targets []string `json:"targets,omitempty"`
}

// OffloadOptions keep state in host memory (package offload).
type OffloadOptions struct {
	// Mode is "off" (or empty), "activations" (what autograd saves moves
	// to the host and back for backward), "optimizer" (master weights
	// and optimizer state on the host, the update computed there,
	// overlapping backward where it may: see overlapsOffload) or "all"
	// (both).
	Mode string `json:"mode,omitempty"`
	// Prefetch is how many blocks' activations backward brings back
	// ahead of the block it differentiates. On the CPU device a
	// goroutine copies them while backward goes on; elsewhere copies
	// complete before they return. Either way it gains little on the CPU
	// (BENCHMARKS.md), and 0 (the default) gives the lowest peak; each
	// block of window adds one block's activations to it.
	Prefetch int `json:"prefetch,omitempty"`
}

// DeviceConfig is where the run computes.
type DeviceConfig struct {
	Name string `json:"name"` // a registered device: cpu, or cuda in a build with the cuda tag
	// Without names device capabilities to hide (device.Capabilities):
	// their composed fallbacks run instead, for comparison or to take a
	// fused kernel out of a run.
	Without  []string `json:"without,omitempty"`
	MemLimit int64    `json:"mem_limit"` // device capacity in bytes; 0: the device's own (cpu: cpu.DefaultCapacity)
}

// ParallelConfig is data parallelism.
type ParallelConfig struct {
	Engine string `json:"engine"` // off, or mpi: one rank per process under mpirun
	Zero   int    `json:"zero"`   // ZeRO stage: 0 (replicated optimizer), 1 (state sharded), 2 (gradients too) or 3 (parameters too)
	// ZeroPrefetch starts each block's gather under -zero 3 while the
	// block before it computes (parallel.ZeRO3Config.Prefetch): the
	// collectives overlap computation, at the cost of one more block's
	// parameters at the peak.
	ZeroPrefetch bool `json:"zero_prefetch,omitempty"`
	// Ranks is the number of ranks -plan and -fit plan one rank of (0:
	// plan one process, unsharded). Training takes the rank count from
	// the engine (mpirun -np).
	Ranks int `json:"ranks,omitempty"`
}

// OutputConfig is what a run writes, and the state it resumes from.
type OutputConfig struct {
	EvalEvery int    `json:"eval_every"`
	Metrics   string `json:"metrics"`
	MemReport string `json:"mem_report"`
	Summary   string `json:"summary"`
	Save      string `json:"save"`
	SaveEvery int    `json:"save_every"`
	// SaveFormat is what Save writes: "memfit" (the default: weights,
	// optimizer and loop state in one file, resumable) or "hf" (the
	// model's weights in Hugging Face's layout, a directory with
	// config.json and model.safetensors; not resumable).
	SaveFormat string `json:"save_format,omitempty"`
	Resume     string `json:"resume"`
	Quiet      bool   `json:"quiet"`
}

// GenerateConfig is generation (token models): instead of training,
// continue Prompt by Tokens tokens (after -resume) and print them.
// Temperature 0 is greedy decoding; TopK 0 and TopP 0 keep every token;
// Config.Seed seeds the sampling.
type GenerateConfig struct {
	Tokens      int     `json:"tokens,omitempty"`
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
		Model:     ModelConfig{Name: models.Reference, Layers: 3, Width: 1024, Heads: 4, Context: 64},
		Data:      DataConfig{Workers: 2, Prefetch: 2, ValSplit: 0.1},
		Optim:     OptimConfig{Epochs: 1, Batch: 256, Name: "adam", Schedule: "const"},
		Precision: PrecisionConfig{AMP: "off"},
		Memory:    MemoryConfig{Accum: 1, Checkpoint: "off", LMHead: "chunked"},
		Device:    DeviceConfig{Name: "cpu"},
		Parallel:  ParallelConfig{Engine: "off"},
		Output:    OutputConfig{EvalEvery: 100},
		Seed:      1,
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
	if c.Memory.LMHead == "" {
		c.Memory.LMHead = "chunked"
	}
	if c.Optim.LR == 0 && c.Optim.Name == "adafactor" {
		c.Optim.LR = DefaultLRAdafactor
	}
	if c.Optim.LR == 0 {
		switch c.Model.Name {
		case "cnn":
			c.Optim.LR = DefaultLRCNN
		case "gpt", "llama":
			c.Optim.LR = DefaultLRGPT
		default:
			c.Optim.LR = DefaultLRMLP
		}
	}
	return c
}

// Validate checks every field a user sets and names the first bad one.
func (c *Config) Validate() error {
	bad := func(flag string, v any, want string) error {
		return fmt.Errorf("-%s %v: %s", flag, v, want)
	}
	if !slices.Contains(models.Names(), c.Model.Name) {
		return bad("model", c.Model.Name, "unknown model (want "+orList(models.Names())+")")
	}
	switch {
	case c.Model.Layers < 1:
		return bad("layers", c.Model.Layers, "want at least 1")
	case c.Model.Width < 1:
		return bad("width", c.Model.Width, "want at least 1")
	case c.Model.Heads < 1:
		return bad("heads", c.Model.Heads, "want at least 1")
	case tokenModel(c.Model.Name) && c.Model.Width%c.Model.Heads != 0:
		return bad("heads", c.Model.Heads, fmt.Sprintf("must divide -width %d", c.Model.Width))
	case c.Model.KVHeads < 0 || (c.Model.KVHeads > 0 && c.Model.Heads%c.Model.KVHeads != 0):
		return bad("kv-heads", c.Model.KVHeads, fmt.Sprintf("must divide -heads %d (0: as many as -heads)", c.Model.Heads))
	case c.Model.Hidden < 0:
		return bad("hidden", c.Model.Hidden, "want 0 (8/3 of -width) or more")
	case c.Model.Context < 1:
		return bad("context", c.Model.Context, "want at least 1")
	case !(c.Model.Dropout >= 0 && c.Model.Dropout < 1): // NaN fails every comparison
		return bad("dropout", c.Model.Dropout, "want a probability in [0, 1)")
	case c.Data.Workers < 0:
		return bad("workers", c.Data.Workers, "want 0 or more")
	case c.Data.Prefetch < 0:
		return bad("prefetch", c.Data.Prefetch, "want 0 or more")
	case !(c.Data.ValSplit >= 0 && c.Data.ValSplit < 1):
		return bad("val-split", c.Data.ValSplit, "want a fraction in [0, 1)")
	case c.Optim.Steps < 0:
		return bad("steps", c.Optim.Steps, "want 0 or more")
	case c.Optim.Steps == 0 && c.Optim.Epochs < 1:
		return bad("epochs", c.Optim.Epochs, "want at least 1 when -steps is 0")
	case c.Optim.Batch < 1:
		return bad("batch", c.Optim.Batch, "want at least 1")
	case !(c.Optim.LR >= 0) || math.IsInf(c.Optim.LR, 1):
		return bad("lr", c.Optim.LR, "want a positive learning rate (0: the model's default)")
	case !(c.Optim.WD >= 0):
		return bad("wd", c.Optim.WD, "want 0 or more")
	case !(c.Optim.Clip >= 0):
		return bad("clip", c.Optim.Clip, "want 0 (off) or more")
	case c.Optim.Warmup < 0:
		return bad("warmup", c.Optim.Warmup, "want 0 or more")
	case c.Memory.Accum < 1:
		return bad("accum", c.Memory.Accum, "want at least 1 micro-batch")
	case c.Memory.Accum > c.Optim.Batch:
		return bad("accum", c.Memory.Accum, fmt.Sprintf("more micro-batches than -batch %d examples", c.Optim.Batch))
	case c.Memory.UnfreezeAt < 0:
		return bad("unfreeze-at", c.Memory.UnfreezeAt, "want 0 (never) or a step")
	case c.Device.MemLimit < 0:
		return bad("mem-limit", c.Device.MemLimit, "want a size such as 512MiB")
	case c.Output.EvalEvery < 0:
		return bad("eval-every", c.Output.EvalEvery, "want 0 (off) or more")
	case c.Output.SaveEvery < 0:
		return bad("save-every", c.Output.SaveEvery, "want 0 (off) or more")
	case c.Fit < 0:
		return bad("fit", c.Fit, "want a size such as 512MiB")
	}
	if !slices.Contains(optim.Names(), c.Optim.Name) {
		return bad("optim", c.Optim.Name, "unknown optimizer (want "+orList(optim.Names())+")")
	}
	switch c.Optim.Schedule {
	case "const", "cosine":
	default:
		return bad("schedule", c.Optim.Schedule, "unknown schedule (want const or cosine)")
	}
	switch c.Precision.AMP {
	case "off", "bf16", "fp16":
	default:
		return bad("amp", c.Precision.AMP, "unknown mode (want off, fp16 or bf16)")
	}
	switch c.Memory.LMHead {
	case "chunked", "full":
	default:
		return bad("lm-head", c.Memory.LMHead, "unknown head (want chunked or full)")
	}
	switch c.Output.SaveFormat {
	case "", "memfit":
	case "hf":
		if !tokenModel(c.Model.Name) {
			return bad("save-format", c.Output.SaveFormat, "Hugging Face's layout is written for -model gpt (GPT-2) and -model llama")
		}
	default:
		return bad("save-format", c.Output.SaveFormat, "unknown format (want memfit or hf)")
	}
	switch c.Precision.Weights {
	case "", "f32":
	case "bf16":
		switch {
		case c.Model.Name == "cnn":
			return bad("weights", c.Precision.Weights, "the cnn keeps f32 parameters (mlp and gpt take bf16)")
		case c.Parallel.Zero == 3:
			return bad("weights", c.Precision.Weights, "not with -zero 3 yet (its flat parameter storage is f32; -zero 1 and 2 shard bf16 parameters)")
		}
	default:
		return bad("weights", c.Precision.Weights, "unknown dtype (want f32 or bf16)")
	}
	if c.Memory.StepInBackward {
		// Each refusal is an update that needs every gradient first.
		switch {
		case c.Memory.Accum > 1:
			return bad("step-in-backward", true, "conflicts with -accum "+strconv.Itoa(c.Memory.Accum)+": the update must wait for the last micro-batch's gradients (use -accum 1, or train without -step-in-backward)")
		case c.Precision.AMP == "fp16":
			return bad("step-in-backward", true, "conflicts with -amp fp16: loss scaling skips a step when any gradient overflows, which is known only after the whole backward (use -amp bf16)")
		case c.Optim.Clip > 0:
			return bad("step-in-backward", true, "conflicts with -clip: clipping by the global norm needs every gradient first")
		case c.Parallel.Engine != "off":
			return bad("step-in-backward", true, "conflicts with -dist: gradients are averaged over the ranks before any update")
		}
	}
	switch {
	case c.Generate.Tokens < 0:
		return bad("generate", strconv.Itoa(c.Generate.Tokens), "want a number of tokens, or 0 to train")
	case c.Generate.Tokens > 0 && !tokenModel(c.Model.Name):
		return bad("generate", strconv.Itoa(c.Generate.Tokens), "generation needs a token model (-model gpt or llama)")
	case c.Generate.Tokens > 0 && c.Generate.Prompt == "":
		return bad("generate", strconv.Itoa(c.Generate.Tokens), "needs -prompt (the text to continue)")
	case c.Generate.Temperature < 0 || math.IsNaN(c.Generate.Temperature):
		return bad("temperature", fmt.Sprint(c.Generate.Temperature), "want 0 (greedy) or more")
	case c.Generate.TopK < 0:
		return bad("top-k", strconv.Itoa(c.Generate.TopK), "want 0 (all tokens) or more")
	case c.Generate.TopP < 0 || c.Generate.TopP > 1 || math.IsNaN(c.Generate.TopP):
		return bad("top-p", fmt.Sprint(c.Generate.TopP), "want 0 < top-p <= 1 (0: all tokens)")
	}
	if !slices.Contains(device.Names(), c.Device.Name) {
		return bad("device", c.Device.Name, "unknown device (want "+orList(device.Names())+"; cuda needs a program that imports device/cuda, as cmd/train does)")
	}
	for _, w := range c.Device.Without {
		if !slices.Contains(device.Capabilities, w) {
			return bad("without", w, "unknown capability (want "+orList(device.Capabilities)+")")
		}
	}
	switch c.Parallel.Engine {
	case "off", "mpi":
	default:
		return bad("dist", c.Parallel.Engine, "unknown engine (want off or mpi)")
	}
	switch {
	case c.Parallel.Zero < 0 || c.Parallel.Zero > 3:
		return bad("zero", c.Parallel.Zero, "want 0, 1 (optimizer state sharded), 2 (gradients too) or 3 (parameters too)")
	case c.Parallel.Ranks < 0:
		return bad("ranks", c.Parallel.Ranks, "want a number of ranks to plan for, or 0")
	case c.Parallel.Ranks > 0 && c.Parallel.Engine == "off":
		return bad("ranks", c.Parallel.Ranks, "plans one rank of -dist; add -dist mpi")
	case c.Parallel.Zero > 0 && c.Memory.UnfreezeAt > 0:
		return bad("zero", c.Parallel.Zero, "cannot be combined with -unfreeze-at (the shards are cut once, from the trainable parameters)")
	case c.Parallel.ZeroPrefetch && c.Parallel.Zero != 3:
		return bad("zero-prefetch", c.Parallel.ZeroPrefetch, "prefetches the parameter gathers of -zero 3; add -zero 3")
	case c.Parallel.Zero == 3 && c.Optim.Name == "adafactor":
		return bad("zero", c.Parallel.Zero, "cannot shard -optim adafactor by element ranges (its row and column statistics span whole matrices): use -zero 1 or 2, which give each rank whole tensors")
	}
	if _, err := ParseCheckpoint(c.Memory.Checkpoint); err != nil {
		return err
	}
	if err := c.validateOffload(); err != nil {
		return err
	}
	if c.Memory.UnfreezeAt > 0 && len(c.Memory.Freeze) == 0 {
		return bad("unfreeze-at", c.Memory.UnfreezeAt, "nothing is frozen (set -freeze)")
	}
	return c.validateLoRA(bad)
}

// validateLoRA checks the -lora flags.
func (c *Config) validateLoRA(bad func(flag string, v any, want string) error) error {
	if c.Memory.LoRA.Rank == 0 {
		switch {
		case c.Memory.LoRA.Alpha != 0:
			return bad("lora-alpha", c.Memory.LoRA.Alpha, "needs -lora (the adapters' rank)")
		case c.Memory.LoRA.Dropout != 0:
			return bad("lora-dropout", c.Memory.LoRA.Dropout, "needs -lora (the adapters' rank)")
		case len(c.Memory.LoRA.Targets) > 0:
			return bad("lora-targets", strings.Join(c.Memory.LoRA.Targets, ","), "needs -lora (the adapters' rank)")
		}
		return nil
	}
	switch {
	case c.Memory.LoRA.Rank < 0:
		return bad("lora", c.Memory.LoRA.Rank, "want a rank of 1 or more (0: no adapters)")
	case !(c.Memory.LoRA.Alpha >= 0) || math.IsInf(c.Memory.LoRA.Alpha, 1):
		return bad("lora-alpha", c.Memory.LoRA.Alpha, "want 0 (the rank: a scale of 1) or more")
	case !(c.Memory.LoRA.Dropout >= 0 && c.Memory.LoRA.Dropout < 1):
		return bad("lora-dropout", c.Memory.LoRA.Dropout, "want a probability in [0, 1)")
	case len(c.Memory.Freeze) > 0:
		return bad("freeze", strings.Join(c.Memory.Freeze, ","), "conflicts with -lora, which freezes every parameter but the adapters")
	case c.Memory.UnfreezeAt > 0:
		return bad("unfreeze-at", c.Memory.UnfreezeAt, "conflicts with -lora, whose base stays frozen")
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
	if c.Model.Init == "" {
		return c, "", nil
	}
	ck, err := hf.Open(c.Model.Init)
	if err != nil {
		return c, "", fmt.Errorf("-init %s: %v", c.Model.Init, err)
	}
	defer ck.Close()
	arch, err := hf.Architecture(ck)
	if err != nil {
		return c, "", fmt.Errorf("-init %s: %v", c.Model.Init, err)
	}
	model := map[string]string{"gpt2": "gpt", "llama": "llama"}[arch]
	if c.Model.Name != model && c.Model.Name != "" && c.Model.Name != Default().Model.Name {
		return c, "", fmt.Errorf("-init %s: a %s checkpoint, which -model %s is not (it is -model %s)", c.Model.Init, arch, c.Model.Name, model)
	}
	var note string
	switch arch {
	case "llama":
		h, n, err := hf.ReadLlamaConfig(ck)
		if err != nil {
			return c, "", fmt.Errorf("-init %s: %v", c.Model.Init, err)
		}
		// A Llama has no position table: its max_position_embeddings
		// (131072 for Llama 3.1) only bounds the sequence, so the run's
		// windows stay -context long, at most that.
		c.Model.Layers, c.Model.Heads, c.Model.KVHeads, c.Model.Width, c.Model.Hidden, c.Model.Context, c.Model.Vocab = h.Layers, h.Heads, h.KVHeads, h.Dim, h.Hidden, min(c.Model.Context, h.Positions), h.Vocab
		note = n
	default:
		h, n, err := hf.ReadGPT2Config(ck)
		if err != nil {
			return c, "", fmt.Errorf("-init %s: %v", c.Model.Init, err)
		}
		c.Model.Layers, c.Model.Heads, c.Model.Width, c.Model.Context, c.Model.Vocab = h.Layers, h.Heads, h.Dim, h.Positions, h.Vocab
		note = n
	}
	c.Model.Name = model
	if c.Data.Tokenizer == "" {
		if st, err := os.Stat(c.Model.Init); err == nil && st.IsDir() {
			for _, f := range []string{"tokenizer.json", "encoder.json", "vocab.json"} {
				if _, err := os.Stat(filepath.Join(c.Model.Init, f)); err == nil {
					c.Data.Tokenizer = c.Model.Init
					break
				}
			}
		}
	}
	return c, note, nil
}

// OffloadsActivations reports whether -offload moves activations.
func (c Config) OffloadsActivations() bool {
	return c.Memory.Offload.Mode == "activations" || c.Memory.Offload.Mode == "all"
}

// OffloadsOptimizer reports whether -offload moves the optimizer.
func (c Config) OffloadsOptimizer() bool {
	return c.Memory.Offload.Mode == "optimizer" || c.Memory.Offload.Mode == "all"
}

// validateOffload checks -offload and what it cannot be combined with.
func (c Config) validateOffload() error {
	bad := func(v any, want string) error { return fmt.Errorf("-offload %v: %s", v, want) }
	switch c.Memory.Offload.Mode {
	case "", "off", "activations", "optimizer", "all":
	default:
		return bad(c.Memory.Offload.Mode, "unknown (want off, activations, optimizer or all)")
	}
	if c.Memory.Offload.Prefetch < 0 {
		return fmt.Errorf("-offload-prefetch %d: want 0 or more blocks", c.Memory.Offload.Prefetch)
	}
	if !c.OffloadsOptimizer() {
		return nil
	}
	// The host optimizer is built over host copies of the trainable
	// parameters, once: what changes that set, shards it or updates on
	// the device is refused rather than half supported.
	switch {
	case c.Memory.StepInBackward:
		return bad(c.Memory.Offload.Mode, "conflicts with -step-in-backward (the update runs on the host after backward)")
	case c.Parallel.Engine != "off":
		return bad(c.Memory.Offload.Mode, "the optimizer is not offloaded under -dist yet (use -zero to shard it, or -offload activations)")
	case len(c.Memory.Freeze) > 0:
		return bad(c.Memory.Offload.Mode, "the optimizer is not offloaded with -freeze yet (use -offload activations)")
	case c.Precision.Weights == "bf16":
		return bad(c.Memory.Offload.Mode, "the optimizer is not offloaded with -weights bf16 yet (use -offload activations)")
	}
	return nil
}
