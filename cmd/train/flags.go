package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/memfit/memfit/device"
	_ "github.com/memfit/memfit/device/cuda" // registers "cuda" (without the cuda tag, its opener says how to rebuild)
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/train"
)

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
	return nil
}

// newFlagSet binds every flag to a field of cfg, grouped as in the help.
func newFlagSet(cfg *train.Config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(out)
	// model
	fs.StringVar(&cfg.Model, "model", cfg.Model, "model: mlp, cnn, gpt or llama")
	fs.IntVar(&cfg.Layers, "layers", cfg.Layers, "hidden layers (mlp) or transformer blocks (gpt, llama)")
	fs.IntVar(&cfg.Width, "width", cfg.Width, "hidden width (mlp), model dimension (gpt, llama) or width/64 and width/32 channels and a width/8 hidden layer (cnn)")
	fs.IntVar(&cfg.Heads, "heads", cfg.Heads, "attention heads (gpt, llama)")
	fs.IntVar(&cfg.KVHeads, "kv-heads", cfg.KVHeads, "key/value heads of grouped-query attention (llama; must divide -heads; 0: as many as -heads)")
	fs.IntVar(&cfg.Hidden, "hidden", cfg.Hidden, "SwiGLU MLP width (llama; 0: 8/3 of -width, rounded up to a multiple of 8)")
	fs.IntVar(&cfg.Context, "context", cfg.Context, "tokens per sequence (gpt, llama)")
	fs.Float64Var(&cfg.Dropout, "dropout", cfg.Dropout, "dropout probability")
	// data
	fs.StringVar(&cfg.Data, "data", cfg.Data, "IDX file or directory, text file, token-shard glob or image folder (default: the embedded synthetic task)")
	fs.StringVar(&cfg.Tokenizer, "tokenizer", cfg.Tokenizer, "tokenize a text -data file with this `path` (GPT-2 byte-level BPE: tokenizer.json, or a directory with encoder.json and vocab.bpe); the vocabulary sets the model's")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "data-loading goroutines")
	fs.IntVar(&cfg.Prefetch, "prefetch", cfg.Prefetch, "batches loaded ahead of the one in use (at most 256MiB of them)")
	fs.Float64Var(&cfg.ValSplit, "val-split", cfg.ValSplit, "fraction of the data held out for evaluation")
	// schedule
	fs.IntVar(&cfg.Steps, "steps", cfg.Steps, "optimizer steps (0: use -epochs)")
	fs.IntVar(&cfg.Epochs, "epochs", cfg.Epochs, "passes over the data when -steps is 0")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "examples per optimizer step")
	fs.Float64Var(&cfg.LR, "lr", cfg.LR, "learning rate (0: 0.001 for mlp, 0.002 for cnn, 0.0003 for gpt and llama; 0.01, the relative-step ceiling, for adafactor)")
	fs.StringVar(&cfg.Optim, "optim", cfg.Optim, "optimizer: sgd, adam, adamw, adam8bit, adamw8bit (8-bit moments) or adafactor (factored second moment)")
	fs.Float64Var(&cfg.WD, "wd", cfg.WD, "weight decay")
	fs.Float64Var(&cfg.Clip, "clip", cfg.Clip, "clip gradients to this global norm (0: off)")
	fs.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "linear learning-rate warm-up steps")
	fs.StringVar(&cfg.Schedule, "schedule", cfg.Schedule, "learning-rate schedule: const or cosine")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed for weights, data order and dropout")
	// memory
	fs.StringVar(&cfg.AMP, "amp", cfg.AMP, "mixed precision: off, fp16 (with loss scaling) or bf16")
	fs.IntVar(&cfg.Accum, "accum", cfg.Accum, "micro-batches per optimizer step (gradient accumulation)")
	fs.StringVar(&cfg.Checkpoint, "checkpoint", cfg.Checkpoint, "activation checkpointing: off, every, sqrt, N segments or a budget such as 300MiB")
	fs.StringVar(&cfg.LMHead, "lm-head", cfg.LMHead, "language-model head and loss (gpt, llama): chunked (over rows: the logits never exist whole) or full")
	fs.StringVar(&cfg.Weights, "weights", "f32", "parameter dtype: f32, or bf16 (no f32 master copy; updates rounded stochastically)")
	fs.BoolVar(&cfg.StepInBackward, "step-in-backward", cfg.StepInBackward, "apply each parameter's update as soon as its gradient is final, and free the gradient (not with -accum > 1, -amp fp16, -clip or -dist)")
	fs.StringVar(&cfg.Offload, "offload", "off", "keep state in host memory: off, activations (saved for backward, brought back block by block), optimizer (state and master weights; the update runs on the CPU, overlapping backward unless -clip or -amp fp16) or all")
	fs.IntVar(&cfg.OffloadPrefetch, "offload-prefetch", cfg.OffloadPrefetch, "with -offload activations: blocks brought back ahead of the one backward is in (on the CPU by a goroutine of their own; 0 gives the lowest peak)")
	fs.Var(listFlag{&cfg.Freeze}, "freeze", "comma-separated parameter path `patterns` to freeze, e.g. embed.*,blocks.[0-2].*")
	fs.IntVar(&cfg.UnfreezeAt, "unfreeze-at", cfg.UnfreezeAt, "step at which frozen parameters start training (0: never)")
	fs.IntVar(&cfg.LoRA, "lora", cfg.LoRA, "train low-rank adapters of this `rank` on Linear layers and freeze everything else (0: off); -save then writes the adapters only")
	fs.Float64Var(&cfg.LoRAAlpha, "lora-alpha", cfg.LoRAAlpha, "LoRA scale numerator: the update is scaled by alpha/rank (0: alpha = rank)")
	fs.Float64Var(&cfg.LoRADropout, "lora-dropout", cfg.LoRADropout, "dropout on the LoRA adapters' input while training")
	fs.Var(listFlag{&cfg.LoRATargets}, "lora-targets", "comma-separated Linear layer path `patterns` to adapt, e.g. *.attn.*,*.mlp.fc (default: every Linear layer)")
	fs.StringVar(&cfg.Device, "device", cfg.Device, "device: cpu or cuda (cuda needs a build with -tags cuda)")
	fs.Var(listFlag{&cfg.Without}, "without", "comma-separated device `capabilities` whose fused kernels to leave out (their composed fallbacks run, for comparison): "+strings.Join(device.Capabilities, ", "))
	fs.Var(sizeFlag{&cfg.MemLimit}, "mem-limit", "device memory capacity, a `size` such as 512MiB or 2GiB (0: on cpu, the memory this process may use less an eighth; a run whose one-example step cannot fit is refused at start)")
	// distributed
	fs.StringVar(&cfg.Dist, "dist", cfg.Dist, "data parallelism: off, or mpi (run under mpirun -np N; -batch is per rank)")
	fs.BoolVar(&cfg.ZeroPrefetch, "zero-prefetch", cfg.ZeroPrefetch, "with -zero 3: gather each block's parameters while the block before it computes (overlap, for one more block's parameters in memory)")
	fs.IntVar(&cfg.Zero, "zero", cfg.Zero, "ZeRO stage with -dist: 0 (replicas), 1 (optimizer state sharded), 2 (gradients too) or 3 (parameters too, gathered block by block)")
	fs.IntVar(&cfg.Ranks, "ranks", cfg.Ranks, "with -dist and -plan or -fit: plan one rank of `n` ranks (mpirun's -np) without running them")
	// output
	fs.IntVar(&cfg.EvalEvery, "eval-every", cfg.EvalEvery, "evaluate every N steps in inference mode (0: only at the end)")
	fs.StringVar(&cfg.Metrics, "metrics", cfg.Metrics, "write per-step metrics to this .csv or .jsonl file")
	fs.StringVar(&cfg.MemReport, "mem-report", cfg.MemReport, "write a memory report: .html, .svg or .txt (with -offload also the host memory's, beside it as NAME.host.EXT)")
	fs.StringVar(&cfg.Summary, "summary", cfg.Summary, "write a JSON summary of the run to this file")
	fs.StringVar(&cfg.Save, "save", cfg.Save, "save the final state (weights as safetensors) to this path")
	fs.IntVar(&cfg.SaveEvery, "save-every", cfg.SaveEvery, "also save every N steps (needs -save)")
	fs.StringVar(&cfg.SaveFormat, "save-format", "memfit", "what -save writes: memfit (resumable state) or hf (the weights in Hugging Face's GPT-2 or Llama layout, a directory)")
	fs.StringVar(&cfg.Init, "init", cfg.Init, "start from a pretrained GPT-2 or Llama in Hugging Face's layout (a `path`: directory with config.json and model.safetensors or its shards, or a .safetensors file); sets -model gpt or llama and its shape")
	fs.StringVar(&cfg.Resume, "resume", cfg.Resume, "resume from a state saved with -save")
	fs.BoolVar(&cfg.Quiet, "quiet", cfg.Quiet, "no progress bar")
	// planning
	fs.BoolVar(&cfg.Plan, "plan", cfg.Plan, "print the predicted peak memory by category and exit")
	fs.IntVar(&cfg.Generate, "generate", cfg.Generate, "instead of training, print the continuation of -prompt by `n` tokens (with -resume or -init; -model gpt or llama)")
	fs.StringVar(&cfg.Prompt, "prompt", cfg.Prompt, "the `text` -generate continues (a text corpus: bytes; token data: token ids separated by spaces)")
	fs.Float64Var(&cfg.Temperature, "temperature", cfg.Temperature, "sampling temperature for -generate (0: greedy)")
	fs.IntVar(&cfg.TopK, "top-k", cfg.TopK, "sample among the `k` most likely tokens (0: all)")
	fs.Float64Var(&cfg.TopP, "top-p", cfg.TopP, "sample among the most likely tokens whose probabilities reach `p` (0: all)")
	fs.Var(sizeFlag{&cfg.Fit}, "fit", "choose techniques so the run fits this `size`, print the choice, then train")
	fs.Usage = func() { usage(fs) }
	return fs
}

// flagGroups orders the help by concern.
var flagGroups = []struct {
	title string
	names []string
}{
	{"model", []string{"model", "layers", "width", "heads", "kv-heads", "hidden", "context", "dropout"}},
	{"data", []string{"data", "tokenizer", "workers", "prefetch", "val-split"}},
	{"schedule", []string{"steps", "epochs", "batch", "lr", "optim", "wd", "clip", "warmup", "schedule", "seed"}},
	{"memory", []string{"amp", "accum", "checkpoint", "lm-head", "weights", "step-in-backward", "offload", "offload-prefetch", "freeze", "unfreeze-at", "lora", "lora-alpha", "lora-dropout", "lora-targets", "device", "without", "mem-limit"}},
	{"distributed", []string{"dist", "zero", "zero-prefetch", "ranks"}},
	{"output", []string{"eval-every", "metrics", "mem-report", "summary", "save", "save-every", "save-format", "resume", "init", "quiet"}},
	{"planning", []string{"plan", "fit"}},
	{"generation", []string{"generate", "prompt", "temperature", "top-k", "top-p"}},
}

// usage prints every flag on one line, grouped, with its default.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: train [flags]\n\nTrains a model with memory-saving techniques and reports where every byte goes.\nWith no flags it trains the reference MLP on an embedded synthetic task.\n")
	for _, g := range flagGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.names {
			f := fs.Lookup(name)
			typ, help := flag.UnquoteUsage(f)
			if typ != "" {
				typ = " " + typ
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "  %-22s %s%s\n", "-"+name+typ, help, def)
		}
	}
}
