package train

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/optim"
)

// Flags is a command line bound to a Config: the core groups' flags and
// every technique's, each remembering its help group, so that -h lists
// them by concern and in the order they were bound.
type Flags struct {
	*flag.FlagSet
	group  string
	groups []flagGroup
}

type flagGroup struct {
	title string
	names []string
}

// The help groups, in the order -h prints them.
var helpGroups = []string{"model", "data", "optimization", "precision", "memory", "device", "parallelism", "output", "planning", "generation"}

// NewFlags binds every flag of a run to c, whose values are the
// defaults: start from Default.
func NewFlags(name string, c *Config) *Flags {
	f := &Flags{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	for _, g := range helpGroups {
		f.groups = append(f.groups, flagGroup{title: g})
	}
	f.group = "model"
	bindModelFlags(f, c)
	f.group = "data"
	bindDataFlags(f, c)
	f.group = "optimization"
	bindOptimFlags(f, c)
	for _, t := range techniques {
		if t.flags != nil {
			f.group = t.group
			t.flags(f, c)
		}
	}
	f.group = "device"
	bindDeviceFlags(f, c)
	f.group = "output"
	bindOutputFlags(f, c)
	f.group = "planning"
	bindPlanFlags(f, c)
	f.group = "generation"
	bindGenerateFlags(f, c)
	return f
}

func (f *Flags) add(name string) {
	for i := range f.groups {
		if f.groups[i].title == f.group {
			f.groups[i].names = append(f.groups[i].names, name)
			return
		}
	}
	panic("train: flag -" + name + " in unknown help group " + f.group)
}

func (f *Flags) stringVar(p *string, name, usage string) {
	f.StringVar(p, name, *p, usage)
	f.add(name)
}
func (f *Flags) intVar(p *int, name, usage string) { f.IntVar(p, name, *p, usage); f.add(name) }
func (f *Flags) floatVar(p *float64, name, usage string) {
	f.Float64Var(p, name, *p, usage)
	f.add(name)
}
func (f *Flags) boolVar(p *bool, name, usage string)   { f.BoolVar(p, name, *p, usage); f.add(name) }
func (f *Flags) uintVar(p *uint64, name, usage string) { f.Uint64Var(p, name, *p, usage); f.add(name) }
func (f *Flags) sizeVar(p *int64, name, usage string)  { f.Var(sizeFlag{p}, name, usage); f.add(name) }
func (f *Flags) listVar(p *[]string, name, usage string) {
	f.Var(listFlag{p}, name, usage)
	f.add(name)
}

// PrintDefaults writes every flag on one line, grouped by concern, with
// its default.
func (f *Flags) PrintDefaults(w io.Writer) {
	for _, g := range f.groups {
		if len(g.names) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			fl := f.Lookup(name)
			typ, help := flag.UnquoteUsage(fl)
			if typ != "" {
				typ = " " + typ
			}
			def := ""
			if fl.DefValue != "" && fl.DefValue != "0" && fl.DefValue != "false" {
				def = fmt.Sprintf(" (default %s)", fl.DefValue)
			}
			fmt.Fprintf(w, "  %-22s %s%s\n", "-"+name+typ, help, def)
		}
	}
}

// Names lists the flags in help order.
func (f *Flags) Names() []string {
	var out []string
	for _, g := range f.groups {
		out = append(out, g.names...)
	}
	return out
}

// ChangedFlags is the command line that turns from into to: each flag
// whose value differs, in help order, written so that NewFlags parses it
// back ("-accum 4 -amp bf16"); always names flags to write even when
// unchanged. -fit's choice is printed through it wherever it is shown.
func ChangedFlags(from, to Config, always ...string) string {
	a, b := NewFlags("from", &from), NewFlags("to", &to)
	var out []string
	for _, name := range b.Names() {
		v := b.Lookup(name).Value.String()
		if v == a.Lookup(name).Value.String() && !slices.Contains(always, name) {
			continue
		}
		if _, ok := b.Lookup(name).Value.(interface{ IsBoolFlag() bool }); ok {
			if v == "true" {
				out = append(out, "-"+name)
			} else {
				out = append(out, "-"+name+"=false")
			}
			continue
		}
		if v == "" || strings.ContainsAny(v, " \t\"'") {
			v = fmt.Sprintf("%q", v)
		}
		out = append(out, "-"+name+" "+v)
	}
	return strings.Join(out, " ")
}

// sizeFlag is a byte size given as 512MiB, 2GiB, 1.5GB or plain bytes.
type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return "0"
	}
	return memory.FormatBytes(*f.v)
}

func (f sizeFlag) Set(s string) error {
	n, err := memory.ParseBytes(s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

// listFlag is a comma-separated list.
type listFlag struct{ v *[]string }

func (f listFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strings.Join(*f.v, ",")
}

func (f listFlag) Set(s string) error {
	*f.v = nil
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*f.v = append(*f.v, p)
		}
	}
	if len(*f.v) == 0 {
		// An empty list would mean the flag's default (every Linear
		// layer, say), which is not what was written.
		return fmt.Errorf("%s names nothing (want a comma-separated list)", quoteShort(s))
	}
	return nil
}

// The core groups' flags: what a run is, apart from its techniques.

func bindModelFlags(f *Flags, c *Config) {
	m := &c.Model
	f.stringVar(&m.Name, "model", "model: "+orList(models.Names()))
	f.intVar(&m.Layers, "layers", "hidden layers (mlp) or transformer blocks (gpt and the decoders: llama, qwen3, ...)")
	f.intVar(&m.Width, "width", "hidden width (mlp), model dimension (gpt, the decoders) or width/64 and width/32 channels and a width/8 hidden layer (cnn)")
	f.intVar(&m.Heads, "heads", "attention heads (gpt, the decoders)")
	f.intVar(&m.KVHeads, "kv-heads", "key/value heads of grouped-query attention (the decoders; must divide -heads; 0: as many as -heads)")
	f.intVar(&m.Hidden, "hidden", "gated MLP width (the decoders; 0: 8/3 of -width, rounded up to a multiple of 8)")
	f.intVar(&m.Context, "context", "tokens per sequence (gpt, the decoders)")
	f.floatVar(&m.Dropout, "dropout", "dropout probability")
	f.intVar(&m.Vocab, "vocab", "a token model's vocabulary (0: the data's: its tokenizer's, or for token shards without one their format's, GPT-2's 50304 for uint16 tokens, Llama 3's 128256 for uint32)")
	f.stringVar(&m.Init, "init", "start from a pretrained model in Hugging Face's layout: GPT-2, Llama, Mistral, Qwen 2/2.5/3, Gemma 2/3, Phi-3/3.5/4-mini, SmolLM 2/3 (a `path`: directory with config.json and model.safetensors or its shards, or a .safetensors file; config.json alone for -plan); sets -model and its shape")
}

func bindDataFlags(f *Flags, c *Config) {
	d := &c.Data
	f.stringVar(&d.Path, "data", "IDX file or directory, text file, token-shard glob, image folder, or fine-tuning records (.jsonl, .json, .parquet: a file, directory or glob) (default: the embedded synthetic task)")
	f.stringVar(&d.Tokenizer, "tokenizer", "tokenize a text -data file with this `path` (GPT-2 byte-level BPE: tokenizer.json, or a directory with encoder.json and vocab.bpe); the vocabulary sets the model's")
	f.intVar(&d.Workers, "workers", "data-loading goroutines")
	f.intVar(&d.Prefetch, "prefetch", "batches loaded ahead of the one in use (at most 256MiB of them)")
	f.floatVar(&d.ValSplit, "val-split", "fraction of the data held out for evaluation")
	f.stringVar(&d.LossOn, "loss-on", "with fine-tuning records: train on the answers (the default for prompt/completion, chat and Alpaca records: prompts, system and user turns are not trained) or all tokens")
	f.sizeVar(&d.MaxRecordBytes, "max-record-bytes", "with fine-tuning records: the most bytes one record may take, a `size` (a JSON Lines line, a parquet row as JSON); a longer one is refused, naming its file and line or row, having read no more of it")
	f.intVar(&d.ShowExamples, "show-examples", "print the first `n` training examples as they will be trained, one JSON object {\"tokens\", \"labels\"} a line (-100: not trained), then exit")
}

func bindOptimFlags(f *Flags, c *Config) {
	o := &c.Optim
	f.intVar(&o.Steps, "steps", "optimizer steps (0: use -epochs)")
	f.intVar(&o.Epochs, "epochs", "passes over the data when -steps is 0")
	f.intVar(&o.Batch, "batch", "examples per optimizer step")
	f.stringVar(&o.Name, "optim", "optimizer: sgd, adam, adamw, adam8bit, adamw8bit (8-bit moments) or adafactor (factored second moment)")
	f.floatVar(&o.LR, "lr", "learning rate (0: 0.001 for mlp, 0.002 for cnn, 0.0003 for gpt and llama; 0.01, the relative-step ceiling, for adafactor)")
	f.floatVar(&o.WD, "wd", "weight decay")
	f.floatVar(&o.Clip, "clip", "clip gradients to this global norm (0: off)")
	f.intVar(&o.Warmup, "warmup", "linear learning-rate warm-up steps")
	f.stringVar(&o.Schedule, "schedule", "learning-rate schedule: const or cosine")
	f.uintVar(&c.Seed, "seed", "seed for weights, data order and dropout")
}

func bindDeviceFlags(f *Flags, c *Config) {
	d := &c.Device
	f.stringVar(&d.Name, "device", "device: cpu or cuda (cuda needs a build with -tags cuda)")
	f.listVar(&d.Without, "without", "comma-separated device `capabilities` whose fused kernels to leave out (their composed fallbacks run, for comparison): "+strings.Join(device.Capabilities, ", "))
	f.sizeVar(&d.MemLimit, "mem-limit", "device memory capacity, a `size` such as 512MiB or 2GiB (0: on cpu, the memory this process may use less an eighth; a run whose one-example step cannot fit is refused at start)")
}

func bindOutputFlags(f *Flags, c *Config) {
	o := &c.Output
	f.intVar(&o.EvalEvery, "eval-every", "evaluate every N steps in inference mode (0: only at the end)")
	f.stringVar(&o.Metrics, "metrics", "write per-step metrics to this .csv or .jsonl file")
	f.stringVar(&o.MemReport, "mem-report", "write a memory report: .html, .svg or .txt (with -offload also the host memory's, beside it as NAME.host.EXT)")
	f.stringVar(&o.Summary, "summary", "write a JSON summary of the run to this file (with -plan: the predicted peaks to the byte, as peak_bytes)")
	f.stringVar(&o.Save, "save", "save the final state (weights as safetensors) to this path")
	f.intVar(&o.SaveEvery, "save-every", "also save every N steps (needs -save)")
	f.stringVar(&o.SaveFormat, "save-format", "what -save writes: memfit (resumable state) or hf (a Hugging Face model directory in the model family's layout: config.json, weights sharded past 5 GB, the tokenizer's files, generation_config.json)")
	f.boolVar(&o.SavePEFT, "save-peft", "with -save-format hf and -lora, also write the adapters in PEFT's layout (adapter_model.safetensors, adapter_config.json)")
	f.stringVar(&o.Resume, "resume", "resume from a state saved with -save")
	f.boolVar(&o.Quiet, "quiet", "no progress bar")
}

func bindPlanFlags(f *Flags, c *Config) {
	f.boolVar(&c.Plan, "plan", "print the predicted peak memory by category and exit")
	f.sizeVar(&c.Fit, "fit", "choose techniques so the run fits this `size`, print the choice, then train")
	f.sizeVar(&c.FitHost, "fit-host", "with -fit on a device with memory of its own (cuda): the host memory -fit may choose to use (-offload), a `size` (0: this machine's available memory less an eighth; on cpu -fit's size counts both)")
}

func bindGenerateFlags(f *Flags, c *Config) {
	g := &c.Generate
	f.intVar(&g.Tokens, "generate", "instead of training, print the continuation of -prompt by `n` tokens (with -resume or -init; -model gpt or a decoder)")
	f.stringVar(&g.Prompt, "prompt", "the `text` -generate continues (a text corpus: bytes; token data: token ids separated by spaces)")
	f.boolVar(&g.Chat, "chat", "with -generate: -prompt is a user's message, rendered with the model's chat template and its generation prompt")
	f.floatVar(&g.Temperature, "temperature", "sampling temperature for -generate (0: greedy)")
	f.intVar(&g.TopK, "top-k", "sample among the `k` most likely tokens (0: all)")
	f.floatVar(&g.TopP, "top-p", "sample among the most likely tokens whose probabilities reach `p` (0: all)")
}

// optimizerNames is for messages: the registered optimizers.
func optimizerNames() string { return orList(optim.Names()) }
