package train

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/models"
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
	// FitHost (bytes; 0: this machine's available memory less a margin)
	// is the host memory Fit may choose to use beside the device's on a
	// device with memory of its own (-offload's host side); on one whose
	// memory is the host's (cpu) Fit's budget counts both, and FitHost is
	// refused.
	FitHost int64 `json:"fit_host,omitempty"`
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
	// Fine-tuning records (recordsdata.go): Pack concatenates examples
	// into windows without padding (the packing technique); LossOn is
	// "answers" (the default for prompt/completion, chat and Alpaca
	// records), "all", or "" for the default; ShowExamples prints that
	// many examples as they will be trained instead of training.
	Pack         bool   `json:"pack,omitempty"`
	LossOn       string `json:"loss_on,omitempty"`
	ShowExamples int    `json:"show_examples,omitempty"`
	// MaxRecordBytes bounds one record's bytes (a JSON Lines line, a
	// parquet row as JSON): a longer one is refused as soon as that
	// much of it is read. 0 is data.DefaultMaxRecordBytes.
	MaxRecordBytes int64 `json:"max_record_bytes,omitempty"`
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
	// Base is the storage of the frozen Linear weights (a LoRA base, the
	// layers -freeze froze): nf4 or int8 (quantized; "+head" appended
	// quantizes an untied LM head too), bf16 or f32; "" is the autocast
	// dtype under -amp, else the parameters' (tech_base.go).
	Base string `json:"base,omitempty"`
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
	// Tile runs the token-wise work of each block (norms, projections,
	// MLP, LoRA paths) over tiles of this many tokens, forward and
	// recomputed in backward (package tile); 0: off (tech_tile.go).
	Tile int `json:"tile,omitempty"`
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
	// Init is a directory of LoRA adapters in PEFT's layout for Model.Init
	// (hf.LoadPEFT): the run starts from them, on the layers they adapt.
	// ApplyInit takes Rank, Alpha and, unless given, Dropout from its
	// adapter_config.json.
	Init string `json:"init,omitempty"`

	fromFile bool // Rank, Alpha and Dropout are Init's (applyInitAdapter ran)
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
	// group says the run is one rank of a group that NewDistributed's
	// caller brought (its communicator) whatever Engine says.
	group bool
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
	// SavePEFT also writes a LoRA run's adapters in PEFT's layout
	// (adapter_model.safetensors, adapter_config.json) beside the merged
	// model of -save-format hf.
	SavePEFT bool   `json:"save_peft,omitempty"`
	Resume   string `json:"resume"`
	Quiet    bool   `json:"quiet"`
}

// GenerateConfig is generation (token models): instead of training,
// continue Prompt by Tokens tokens (after -resume) and print them.
// Temperature 0 is greedy decoding; TopK 0 and TopP 0 keep every token;
// Config.Seed seeds the sampling.
type GenerateConfig struct {
	Tokens int    `json:"tokens,omitempty"`
	Prompt string `json:"prompt,omitempty"`
	// Chat renders Prompt as a user message with the model's chat
	// template and its generation prompt.
	Chat        bool    `json:"chat,omitempty"`
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
		Data:      DataConfig{Workers: 2, Prefetch: 2, ValSplit: 0.1, MaxRecordBytes: data.DefaultMaxRecordBytes},
		Optim:     OptimConfig{Epochs: 1, Batch: 256, Name: "adam", Schedule: "const"},
		Precision: PrecisionConfig{AMP: "off", Weights: "f32"},
		Memory:    MemoryConfig{Accum: 1, Checkpoint: "off", LMHead: "chunked", Offload: OffloadOptions{Mode: "off"}},
		Device:    DeviceConfig{Name: "cpu"},
		Parallel:  ParallelConfig{Engine: "off"},
		Output:    OutputConfig{EvalEvery: 100, SaveFormat: "memfit"},
		Seed:      1,
	}
}

// Bounds of the flags whose value sizes what the host allocates before
// any plan can say so.
const (
	maxBatchTokens = 1 << 28 // positions of a batch: 1 GiB per int32 host array
	maxWorkers     = 256     // -prefetch needs none: PrefetchBytes bounds it
	maxRecordBytes = 1 << 30 // -max-record-bytes: a record is held whole, several times over, while it is decoded and tokenized
)

// maxFitHost bounds -fit-host: it allocates nothing, but a budget past
// 1 PiB of host memory is no machine's (a typo, or a unit too large).
const maxFitHost = 1 << 50

// DefaultLRAdafactor is -optim adafactor's learning rate: its learning
// rate is the ceiling of the relative step size ρ = min(lr, 1/√t), which
// the paper sets to 10⁻² whatever the model (optim.Adafactor).
const DefaultLRAdafactor = 1e-2

// Resolved fills the fields whose defaults depend on the model: a zero LR
// becomes the model's (models.Kind.LR; 1e-2, the paper's relative-step
// ceiling, with -optim adafactor); an empty LMHead (a Config from before
// it existed) is chunked.
func (c Config) Resolved() Config {
	if c.Memory.LMHead == "" {
		c.Memory.LMHead = "chunked"
	}
	if c.Optim.LR == 0 && c.Optim.Name == "adafactor" {
		c.Optim.LR = DefaultLRAdafactor
	}
	if k, ok := c.kind(); c.Optim.LR == 0 && ok {
		c.Optim.LR = k.LR
	}
	return c
}

// bad is a flag's error: "-accum 0: want at least 1 micro-batch".
func bad(flag string, v any, want string) error {
	if s, ok := v.(string); ok && len(s) > 200 {
		// A flag's value is the user's input: quoted at most this far.
		v = quoteShort(s)
	}
	return fmt.Errorf("-%s %v: %s", flag, v, want)
}

// Validate checks every field a user sets and names the first bad one:
// the core groups (model, data, optimization, device, outputs,
// generation), then each technique's options and the rules the
// techniques declare against each other (technique.go).
func (c *Config) Validate() error {
	if err := c.checkModel(); err != nil {
		return err
	}
	if err := c.checkCore(); err != nil {
		return err
	}
	return c.checkTechniques()
}

// checkModel checks the model's name and shape.
func (c *Config) checkModel() error {
	m := c.Model
	k, ok := c.kind()
	if !ok {
		return bad("model", m.Name, "unknown model (want "+orList(models.Names())+")")
	}
	// The bounds are config.json's (hf): far above every released
	// model, and low enough that a model's size is exact in an int64, so
	// that a hostile value is refused by arithmetic before anything is
	// built.
	switch {
	case m.Layers < 1:
		return bad("layers", m.Layers, "want at least 1")
	case m.Layers > hf.MaxLayers:
		return bad("layers", m.Layers, fmt.Sprintf("over %d, the bound on layers", hf.MaxLayers))
	case m.Width < 1:
		return bad("width", m.Width, "want at least 1")
	case m.Width > hf.MaxWidth:
		return bad("width", m.Width, fmt.Sprintf("over %d, the bound on widths", hf.MaxWidth))
	case m.Heads < 1:
		return bad("heads", m.Heads, "want at least 1")
	case m.Heads > min(m.Width, hf.MaxHeads):
		return bad("heads", m.Heads, fmt.Sprintf("more heads than -width %d or the bound on heads, %d", m.Width, hf.MaxHeads))
	case m.Hidden > hf.MaxMLPWidth:
		return bad("hidden", m.Hidden, fmt.Sprintf("over %d, the bound on MLP widths", hf.MaxMLPWidth))
	case m.Context > hf.MaxPositions:
		return bad("context", m.Context, fmt.Sprintf("over %d, the bound on positions", hf.MaxPositions))
	case m.Vocab < 0 || m.Vocab > hf.MaxVocab:
		return bad("vocab", m.Vocab, fmt.Sprintf("want 0 (the data's) up to %d, the bound on vocabularies", hf.MaxVocab))
	case k.Tokens && m.Width%m.Heads != 0:
		return bad("heads", m.Heads, fmt.Sprintf("must divide -width %d", m.Width))
	case m.KVHeads < 0 || (m.KVHeads > 0 && m.Heads%m.KVHeads != 0):
		return bad("kv-heads", m.KVHeads, fmt.Sprintf("must divide -heads %d (0: as many as -heads)", m.Heads))
	case m.Hidden < 0:
		return bad("hidden", m.Hidden, "want 0 (8/3 of -width) or more")
	case m.Context < 1:
		return bad("context", m.Context, "want at least 1")
	case !(m.Dropout >= 0 && m.Dropout < 1): // NaN fails every comparison
		return bad("dropout", m.Dropout, "want a probability in [0, 1)")
	}
	return nil
}

// checkCore checks the data, optimization, device, output and generation
// settings.
func (c *Config) checkCore() error {
	d, o, out := c.Data, c.Optim, c.Output
	switch {
	case d.Workers < 0:
		return bad("workers", d.Workers, "want 0 or more")
	case d.Prefetch < 0:
		return bad("prefetch", d.Prefetch, "want 0 or more")
	case !(d.ValSplit >= 0 && d.ValSplit < 1):
		return bad("val-split", d.ValSplit, "want a fraction in [0, 1)")
	case o.Steps < 0:
		return bad("steps", o.Steps, "want 0 or more")
	case o.Steps == 0 && o.Epochs < 1:
		return bad("epochs", o.Epochs, "want at least 1 when -steps is 0")
	case o.Batch < 1:
		return bad("batch", o.Batch, "want at least 1")
	case int64(o.Batch)*int64(max(c.Model.Context, 1)) > maxBatchTokens:
		return bad("batch", o.Batch, fmt.Sprintf("-batch × -context over %d positions, the bound on a batch (its inputs and targets are host arrays)", maxBatchTokens))
	case d.Workers > maxWorkers:
		return bad("workers", d.Workers, fmt.Sprintf("over %d: more data-loading goroutines only contend", maxWorkers))
	case !(o.LR >= 0) || math.IsInf(o.LR, 1):
		return bad("lr", o.LR, "want a positive learning rate (0: the model's default)")
	case !(o.WD >= 0):
		return bad("wd", o.WD, "want 0 or more")
	case !(o.Clip >= 0):
		return bad("clip", o.Clip, "want 0 (off) or more")
	case o.Warmup < 0:
		return bad("warmup", o.Warmup, "want 0 or more")
	case c.Device.MemLimit < 0:
		return bad("mem-limit", c.Device.MemLimit, "want a size such as 512MiB")
	case out.EvalEvery < 0:
		return bad("eval-every", out.EvalEvery, "want 0 (off) or more")
	case out.SaveEvery < 0:
		return bad("save-every", out.SaveEvery, "want 0 (off) or more")
	case d.ShowExamples < 0:
		return bad("show-examples", d.ShowExamples, "want a number of examples to print, or 0 to train")
	case d.MaxRecordBytes < 0 || d.MaxRecordBytes > maxRecordBytes:
		return bad("max-record-bytes", d.MaxRecordBytes, fmt.Sprintf("want a size up to %dMiB (a record is held whole in memory, several times over while it is decoded and tokenized; 0: %dMiB)", maxRecordBytes>>20, data.DefaultMaxRecordBytes>>20))
	case c.Fit < 0:
		return bad("fit", c.Fit, "want a size such as 512MiB")
	case c.FitHost < 0 || c.FitHost > maxFitHost:
		return bad("fit-host", c.FitHost, fmt.Sprintf("want a size up to %dTiB, the bound on host budgets (no machine has more)", maxFitHost>>40))
	case c.FitHost > 0 && c.Fit == 0:
		return bad("fit-host", c.FitHost, "needs -fit (it is the host memory -fit may choose to use)")
	case c.FitHost > 0 && device.OnHost(c.Device.Name):
		return bad("fit-host", c.FitHost, fmt.Sprintf("-device %s's memory is the host's: -fit's size budgets device and host memory together", c.Device.Name))
	}
	switch o.Schedule {
	case "const", "cosine":
	default:
		return bad("schedule", o.Schedule, "unknown schedule (want const or cosine)")
	}
	k, _ := c.kind()
	switch out.SaveFormat {
	case "", "memfit":
	case "hf":
		if k.HF == "" {
			return bad("save-format", out.SaveFormat, "Hugging Face's layout is written for "+orList(hfModels()))
		}
	default:
		return bad("save-format", out.SaveFormat, "unknown format (want memfit or hf)")
	}
	switch {
	case !out.SavePEFT:
	case out.SaveFormat != "hf":
		return bad("save-peft", "true", "needs -save-format hf (the adapters go beside the merged model)")
	case c.Memory.LoRA.Rank == 0:
		return bad("save-peft", "true", "needs -lora (there are no adapters to write)")
	case !hf.HasPEFTLayout(k.HF):
		return bad("save-peft", "true", fmt.Sprintf("PEFT's layout is written for the decoder families, not -model %s", c.Model.Name))
	}
	g := c.Generate
	switch {
	case g.Tokens < 0:
		return bad("generate", strconv.Itoa(g.Tokens), "want a number of tokens, or 0 to train")
	case g.Tokens > 0 && !k.Tokens:
		return bad("generate", strconv.Itoa(g.Tokens), "generation needs a token model ("+orList(tokenModels())+")")
	case g.Chat && g.Tokens == 0:
		return bad("chat", true, "needs -generate (it renders -prompt as a chat message)")
	case g.Tokens > 0 && g.Prompt == "":
		return bad("generate", strconv.Itoa(g.Tokens), "needs -prompt (the text to continue)")
	case g.Tokens > hf.MaxPositions:
		return bad("generate", strconv.Itoa(g.Tokens), fmt.Sprintf("over %d, the bound on positions (the prompt and its continuation fit the model's context)", hf.MaxPositions))
	case !(g.Temperature >= 0) || math.IsInf(g.Temperature, 1):
		return bad("temperature", fmt.Sprint(g.Temperature), "want 0 (greedy) or a finite temperature above it")
	case g.TopK < 0:
		return bad("top-k", strconv.Itoa(g.TopK), "want 0 (all tokens) or more")
	case g.TopP < 0 || g.TopP > 1 || math.IsNaN(g.TopP):
		return bad("top-p", fmt.Sprint(g.TopP), "want 0 < top-p <= 1 (0: all tokens)")
	}
	if !slices.Contains(device.Names(), c.Device.Name) {
		return bad("device", c.Device.Name, "unknown device (want "+orList(device.Names())+"; cuda needs a program that imports device/cuda, as cmd/train does)")
	}
	for _, w := range c.Device.Without {
		if !slices.Contains(device.Capabilities, w) {
			return bad("without", w, "unknown capability (want "+orList(device.Capabilities)+")")
		}
	}
	return nil
}

// tokenModels lists the registered models that take token sequences, as
// "-model gpt" flags.
func tokenModels() []string {
	var out []string
	for _, n := range models.Names() {
		if k, _ := models.KindOf(n); k.Tokens {
			out = append(out, "-model "+n)
		}
	}
	return out
}

// hfModels lists the registered models Hugging Face's layout is written
// for, as "-model gpt" flags.
func hfModels() []string {
	var out []string
	for _, n := range models.Names() {
		if k, _ := models.KindOf(n); k.HF != "" {
			out = append(out, "-model "+n)
		}
	}
	return out
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ApplyInit takes the model from Init's checkpoint: the registered model
// of its Hugging Face architecture (hf.Architecture, models.ByHF), with
// its layers, heads (and a Llama's key/value heads and MLP width), width
// and vocabulary, and its context (a GPT-2's learned positions; for a
// Llama, -context, at most the model's max_position_embeddings). A shape
// field set to something else than both the default and the
// checkpoint's is refused rather than silently replaced (ApplyInitSet
// knows which flags were given). With Memory.LoRA.Init it also takes
// the adapters' rank, α and dropout from their adapter_config.json
// (applyInitAdapter). It returns a note when the checkpoint has no
// config.json and the shape was inferred. Without Init it changes
// nothing.
func (c Config) ApplyInit() (Config, string, error) {
	def := Default().Model
	return c.ApplyInitSet(func(flag string) bool {
		m := c.Model
		switch flag {
		case "layers":
			return m.Layers != def.Layers
		case "width":
			return m.Width != def.Width
		case "heads":
			return m.Heads != def.Heads
		case "kv-heads":
			return m.KVHeads != def.KVHeads
		case "hidden":
			return m.Hidden != def.Hidden
		case "context":
			return m.Context != def.Context
		case "vocab":
			return m.Vocab != def.Vocab
		case "lora-dropout":
			return c.Memory.LoRA.Dropout != Default().Memory.LoRA.Dropout
		}
		return false
	})
}

// applyInitAdapter takes the LoRA options from the adapter_config.json
// of Memory.LoRA.Init: its rank (-lora must be 0 or the same), its α
// (-lora-alpha likewise; with use_rslora, the α whose α/r is the file's
// scale α/√r) and its dropout unless -lora-dropout is given, since a run
// that trains the adapters further may choose another. The layers are
// the file's, read when the model is built. It runs once: what it set
// would look given to a second call.
func (c *Config) applyInitAdapter(set func(flag string) bool) error {
	l := &c.Memory.LoRA
	if l.Init == "" || l.fromFile {
		return nil
	}
	pc, err := hf.ReadPEFTConfig(l.Init)
	if err != nil {
		return fmt.Errorf("-init-adapter %s: %v", l.Init, strings.TrimPrefix(err.Error(), "hf: "))
	}
	alpha := pc.Alpha
	if pc.RSLoRA {
		alpha = pc.Scale() * float64(pc.Rank)
	}
	switch {
	case l.Rank != 0 && l.Rank != pc.Rank:
		return fmt.Errorf("-lora %d: -init-adapter %s holds adapters of rank %d (drop -lora: the file sets it)", l.Rank, l.Init, pc.Rank)
	case l.Alpha != 0 && l.Alpha != alpha:
		return fmt.Errorf("-lora-alpha %v: -init-adapter %s's adapters have alpha %v (drop -lora-alpha: the file sets it)", l.Alpha, l.Init, alpha)
	}
	l.Rank, l.Alpha, l.fromFile = pc.Rank, alpha, true
	if !set("lora-dropout") {
		l.Dropout = pc.Dropout
	}
	return nil
}

// ApplyInitSet is ApplyInit for a command line: set reports whether a
// flag was given, so that a shape flag given with -init and disagreeing
// with the checkpoint is refused even when it has its default value.
func (c Config) ApplyInitSet(set func(flag string) bool) (Config, string, error) {
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
	model, ok := models.ByHF(arch)
	if !ok {
		return c, "", fmt.Errorf("-init %s: a %s checkpoint, which no registered model imports", c.Model.Init, arch)
	}
	if c.Model.Name != model && c.Model.Name != "" && c.Model.Name != Default().Model.Name {
		return c, "", fmt.Errorf("-init %s: a %s checkpoint, which -model %s is not (it is -model %s)", c.Model.Init, arch, c.Model.Name, model)
	}
	h, note, err := hf.ReadShape(ck)
	if err != nil {
		return c, "", fmt.Errorf("-init %s: %v", c.Model.Init, err)
	}
	m := &c.Model
	for _, f := range []struct {
		flag       string
		given, has int
	}{
		{"layers", m.Layers, h.Layers}, {"width", m.Width, h.Dim}, {"heads", m.Heads, h.Heads},
		{"kv-heads", m.KVHeads, h.KVHeads}, {"hidden", m.Hidden, h.Hidden}, {"vocab", m.Vocab, h.Vocab},
	} {
		if set(f.flag) && f.given != f.has && !(f.flag == "kv-heads" && f.given == 0) && !(f.flag == "hidden" && f.given == 0) {
			return c, "", fmt.Errorf("-%s %d: -init %s is a %s of %d (drop -%s: the checkpoint sets it)", f.flag, f.given, c.Model.Init, arch, f.has, f.flag)
		}
	}
	context := m.Context
	m.Name, m.Layers, m.Heads, m.KVHeads, m.Width, m.Hidden, m.Vocab = model, h.Layers, h.Heads, h.KVHeads, h.Dim, h.Hidden, h.Vocab
	switch {
	case h.Learned && set("context") && context != h.Positions:
		return c, "", fmt.Errorf("-context %d: -init %s has a table of %d learned positions (drop -context: the checkpoint sets it)", context, c.Model.Init, h.Positions)
	case h.Learned:
		m.Context = h.Positions
	case context > h.Positions && set("context"):
		return c, "", fmt.Errorf("-context %d: over -init %s's max_position_embeddings, %d", context, c.Model.Init, h.Positions)
	default:
		// Rotary positions (Llama) have no table: the run's windows are
		// -context long, at most max_position_embeddings.
		m.Context = min(context, h.Positions)
	}
	if err := c.applyInitAdapter(set); err != nil {
		return c, "", err
	}
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
