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
	fs.StringVar(&cfg.Model.Name, "model", cfg.Model.Name, "model: mlp, cnn, gpt or llama")
	fs.IntVar(&cfg.Model.Layers, "layers", cfg.Model.Layers, "hidden layers (mlp) or transformer blocks (gpt, llama)")
	fs.IntVar(&cfg.Model.Width, "width", cfg.Model.Width, "hidden width (mlp), model dimension (gpt, llama) or width/64 and width/32 channels and a width/8 hidden layer (cnn)")
	fs.IntVar(&cfg.Model.Heads, "heads", cfg.Model.Heads, "attention heads (gpt, llama)")
	fs.IntVar(&cfg.Model.KVHeads, "kv-heads", cfg.Model.KVHeads, "key/value heads of grouped-query attention (llama; must divide -heads; 0: as many as -heads)")
	fs.IntVar(&cfg.Model.Hidden, "hidden", cfg.Model.Hidden, "SwiGLU MLP width (llama; 0: 8/3 of -width, rounded up to a multiple of 8)")
	fs.IntVar(&cfg.Model.Context, "context", cfg.Model.Context, "tokens per sequence (gpt, llama)")
	fs.Float64Var(&cfg.Model.Dropout, "dropout", cfg.Model.Dropout, "dropout probability")
	// data
	fs.StringVar(&cfg.Data.Path, "data", cfg.Data.Path, "IDX file or directory, text file, token-shard glob or image folder (default: the embedded synthetic task)")
	fs.StringVar(&cfg.Data.Tokenizer, "tokenizer", cfg.Data.Tokenizer, "tokenize a text -data file with this `path` (GPT-2 byte-level BPE: tokenizer.json, or a directory with encoder.json and vocab.bpe); the vocabulary sets the model's")
	fs.IntVar(&cfg.Data.Workers, "workers", cfg.Data.Workers, "data-loading goroutines")
	fs.IntVar(&cfg.Data.Prefetch, "prefetch", cfg.Data.Prefetch, "batches loaded ahead of the one in use (at most 256MiB of them)")
	fs.Float64Var(&cfg.Data.ValSplit, "val-split", cfg.Data.ValSplit, "fraction of the data held out for evaluation")
	// schedule
	fs.IntVar(&cfg.Optim.Steps, "steps", cfg.Optim.Steps, "optimizer steps (0: use -epochs)")
	fs.IntVar(&cfg.Optim.Epochs, "epochs", cfg.Optim.Epochs, "passes over the data when -steps is 0")
	fs.IntVar(&cfg.Optim.Batch, "batch", cfg.Optim.Batch, "examples per optimizer step")
	fs.Float64Var(&cfg.Optim.LR, "lr", cfg.Optim.LR, "learning rate (0: 0.001 for mlp, 0.002 for cnn, 0.0003 for gpt and llama; 0.01, the relative-step ceiling, for adafactor)")
	fs.StringVar(&cfg.Optim.Name, "optim", cfg.Optim.Name, "optimizer: sgd, adam, adamw, adam8bit, adamw8bit (8-bit moments) or adafactor (factored second moment)")
	fs.Float64Var(&cfg.Optim.WD, "wd", cfg.Optim.WD, "weight decay")
	fs.Float64Var(&cfg.Optim.Clip, "clip", cfg.Optim.Clip, "clip gradients to this global norm (0: off)")
	fs.IntVar(&cfg.Optim.Warmup, "warmup", cfg.Optim.Warmup, "linear learning-rate warm-up steps")
	fs.StringVar(&cfg.Optim.Schedule, "schedule", cfg.Optim.Schedule, "learning-rate schedule: const or cosine")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed for weights, data order and dropout")
	// memory
	fs.StringVar(&cfg.Precision.AMP, "amp", cfg.Precision.AMP, "mixed precision: off, fp16 (with loss scaling) or bf16")
	fs.IntVar(&cfg.Memory.Accum, "accum", cfg.Memory.Accum, "micro-batches per optimizer step (gradient accumulation)")
	fs.StringVar(&cfg.Memory.Checkpoint, "checkpoint", cfg.Memory.Checkpoint, "activation checkpointing: off, every, sqrt, N segments or a budget such as 300MiB")
	fs.StringVar(&cfg.Memory.LMHead, "lm-head", cfg.Memory.LMHead, "language-model head and loss (gpt, llama): chunked (over rows: the logits never exist whole) or full")
	fs.StringVar(&cfg.Precision.Weights, "weights", "f32", "parameter dtype: f32, or bf16 (no f32 master copy; updates rounded stochastically)")
	fs.BoolVar(&cfg.Memory.StepInBackward, "step-in-backward", cfg.Memory.StepInBackward, "apply each parameter's update as soon as its gradient is final, and free the gradient (not with -accum > 1, -amp fp16, -clip or -dist)")
	fs.StringVar(&cfg.Memory.Offload.Mode, "offload", "off", "keep state in host memory: off, activations (saved for backward, brought back block by block), optimizer (state and master weights; the update runs on the CPU, overlapping backward unless -clip or -amp fp16) or all")
	fs.IntVar(&cfg.Memory.Offload.Prefetch, "offload-prefetch", cfg.Memory.Offload.Prefetch, "with -offload activations: blocks brought back ahead of the one backward is in (on the CPU by a goroutine of their own; 0 gives the lowest peak)")
	fs.Var(listFlag{&cfg.Memory.Freeze}, "freeze", "comma-separated parameter path `patterns` to freeze, e.g. embed.*,blocks.[0-2].*")
	fs.IntVar(&cfg.Memory.UnfreezeAt, "unfreeze-at", cfg.Memory.UnfreezeAt, "step at which frozen parameters start training (0: never)")
	fs.IntVar(&cfg.Memory.LoRA.Rank, "lora", cfg.Memory.LoRA.Rank, "train low-rank adapters of this `rank` on Linear layers and freeze everything else (0: off); -save then writes the adapters only")
	fs.Float64Var(&cfg.Memory.LoRA.Alpha, "lora-alpha", cfg.Memory.LoRA.Alpha, "LoRA scale numerator: the update is scaled by alpha/rank (0: alpha = rank)")
	fs.Float64Var(&cfg.Memory.LoRA.Dropout, "lora-dropout", cfg.Memory.LoRA.Dropout, "dropout on the LoRA adapters' input while training")
	fs.Var(listFlag{&cfg.Memory.LoRA.Targets}, "lora-targets", "comma-separated Linear layer path `patterns` to adapt, e.g. *.attn.*,*.mlp.fc (default: every Linear layer)")
	fs.StringVar(&cfg.Device.Name, "device", cfg.Device.Name, "device: cpu or cuda (cuda needs a build with -tags cuda)")
	fs.Var(listFlag{&cfg.Device.Without}, "without", "comma-separated device `capabilities` whose fused kernels to leave out (their composed fallbacks run, for comparison): "+strings.Join(device.Capabilities, ", "))
	fs.Var(sizeFlag{&cfg.Device.MemLimit}, "mem-limit", "device memory capacity, a `size` such as 512MiB or 2GiB (0: on cpu, the memory this process may use less an eighth; a run whose one-example step cannot fit is refused at start)")
	// distributed
	fs.StringVar(&cfg.Parallel.Engine, "dist", cfg.Parallel.Engine, "data parallelism: off, or mpi (run under mpirun -np N; -batch is per rank)")
	fs.BoolVar(&cfg.Parallel.ZeroPrefetch, "zero-prefetch", cfg.Parallel.ZeroPrefetch, "with -zero 3: gather each block's parameters while the block before it computes (overlap, for one more block's parameters in memory)")
	fs.IntVar(&cfg.Parallel.Zero, "zero", cfg.Parallel.Zero, "ZeRO stage with -dist: 0 (replicas), 1 (optimizer state sharded), 2 (gradients too) or 3 (parameters too, gathered block by block)")
	fs.IntVar(&cfg.Parallel.Ranks, "ranks", cfg.Parallel.Ranks, "with -dist and -plan or -fit: plan one rank of `n` ranks (mpirun's -np) without running them")
	// output
	fs.IntVar(&cfg.Output.EvalEvery, "eval-every", cfg.Output.EvalEvery, "evaluate every N steps in inference mode (0: only at the end)")
	fs.StringVar(&cfg.Output.Metrics, "metrics", cfg.Output.Metrics, "write per-step metrics to this .csv or .jsonl file")
	fs.StringVar(&cfg.Output.MemReport, "mem-report", cfg.Output.MemReport, "write a memory report: .html, .svg or .txt (with -offload also the host memory's, beside it as NAME.host.EXT)")
	fs.StringVar(&cfg.Output.Summary, "summary", cfg.Output.Summary, "write a JSON summary of the run to this file")
	fs.StringVar(&cfg.Output.Save, "save", cfg.Output.Save, "save the final state (weights as safetensors) to this path")
	fs.IntVar(&cfg.Output.SaveEvery, "save-every", cfg.Output.SaveEvery, "also save every N steps (needs -save)")
	fs.StringVar(&cfg.Output.SaveFormat, "save-format", "memfit", "what -save writes: memfit (resumable state) or hf (the weights in Hugging Face's GPT-2 or Llama layout, a directory)")
	fs.StringVar(&cfg.Model.Init, "init", cfg.Model.Init, "start from a pretrained GPT-2 or Llama in Hugging Face's layout (a `path`: directory with config.json and model.safetensors or its shards, or a .safetensors file); sets -model gpt or llama and its shape")
	fs.StringVar(&cfg.Output.Resume, "resume", cfg.Output.Resume, "resume from a state saved with -save")
	fs.BoolVar(&cfg.Output.Quiet, "quiet", cfg.Output.Quiet, "no progress bar")
	// planning
	fs.BoolVar(&cfg.Plan, "plan", cfg.Plan, "print the predicted peak memory by category and exit")
	fs.IntVar(&cfg.Generate.Tokens, "generate", cfg.Generate.Tokens, "instead of training, print the continuation of -prompt by `n` tokens (with -resume or -init; -model gpt or llama)")
	fs.StringVar(&cfg.Generate.Prompt, "prompt", cfg.Generate.Prompt, "the `text` -generate continues (a text corpus: bytes; token data: token ids separated by spaces)")
	fs.Float64Var(&cfg.Generate.Temperature, "temperature", cfg.Generate.Temperature, "sampling temperature for -generate (0: greedy)")
	fs.IntVar(&cfg.Generate.TopK, "top-k", cfg.Generate.TopK, "sample among the `k` most likely tokens (0: all)")
	fs.Float64Var(&cfg.Generate.TopP, "top-p", cfg.Generate.TopP, "sample among the most likely tokens whose probabilities reach `p` (0: all)")
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
