package train

import (
	"bytes"
	"encoding/json"
)

// UnmarshalJSON reads a Config in either layout: the grouped one
// MarshalJSON writes, or the flat one of memfit before the techniques
// were grouped (checkpoints and -summary files written then), so that
// old checkpoints keep resuming.
func (c *Config) UnmarshalJSON(b []byte) error {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	// The flat layout names the model with a string where the grouped
	// one has an object.
	if m, ok := probe["model"]; ok && len(bytes.TrimSpace(m)) > 0 && bytes.TrimSpace(m)[0] == '"' {
		var old legacyConfig
		if err := json.Unmarshal(b, &old); err != nil {
			return err
		}
		*c = old.upgrade()
		return nil
	}
	type grouped Config // without this method
	return json.Unmarshal(b, (*grouped)(c))
}

// legacyConfig is Config's flat JSON layout, as checkpoints and summaries
// before the grouping hold it.
type legacyConfig struct {
	Model           string   `json:"model"`
	Layers          int      `json:"layers"`
	Width           int      `json:"width"`
	Heads           int      `json:"heads"`
	Context         int      `json:"context"`
	Dropout         float64  `json:"dropout"`
	KVHeads         int      `json:"kv_heads"`
	Hidden          int      `json:"hidden"`
	Data            string   `json:"data"`
	Workers         int      `json:"workers"`
	Prefetch        int      `json:"prefetch"`
	ValSplit        float64  `json:"val_split"`
	Steps           int      `json:"steps"`
	Epochs          int      `json:"epochs"`
	Batch           int      `json:"batch"`
	LR              float64  `json:"lr"`
	Optim           string   `json:"optim"`
	WD              float64  `json:"wd"`
	Clip            float64  `json:"clip"`
	Warmup          int      `json:"warmup"`
	Schedule        string   `json:"schedule"`
	Seed            uint64   `json:"seed"`
	AMP             string   `json:"amp"`
	Accum           int      `json:"accum"`
	Checkpoint      string   `json:"checkpoint"`
	LMHead          string   `json:"lm_head"`
	Freeze          []string `json:"freeze"`
	LoRA            int      `json:"lora"`
	LoRAAlpha       float64  `json:"lora_alpha"`
	LoRADropout     float64  `json:"lora_dropout"`
	LoRATargets     []string `json:"lora_targets"`
	Weights         string   `json:"weights"`
	StepInBackward  bool     `json:"step_in_backward"`
	UnfreezeAt      int      `json:"unfreeze_at"`
	Offload         string   `json:"offload"`
	OffloadPrefetch int      `json:"offload_prefetch"`
	Device          string   `json:"device"`
	Without         []string `json:"without"`
	MemLimit        int64    `json:"mem_limit"`
	Dist            string   `json:"dist"`
	Zero            int      `json:"zero"`
	ZeroPrefetch    bool     `json:"zero_prefetch"`
	Ranks           int      `json:"ranks"`
	EvalEvery       int      `json:"eval_every"`
	Metrics         string   `json:"metrics"`
	MemReport       string   `json:"mem_report"`
	Summary         string   `json:"summary"`
	Save            string   `json:"save"`
	SaveEvery       int      `json:"save_every"`
	Resume          string   `json:"resume"`
	Quiet           bool     `json:"quiet"`
	LMHeadChunkRows int      `json:"lm_head_chunk_rows"`
	SkipNonFinite   bool     `json:"skip_non_finite"`
	Plan            bool     `json:"plan"`
	Fit             int64    `json:"fit"`
	Init            string   `json:"init"`
	Tokenizer       string   `json:"tokenizer"`
	SaveFormat      string   `json:"save_format"`
	Vocab           int      `json:"vocab"`
	Generate        int      `json:"generate"`
	Prompt          string   `json:"prompt"`
	Temperature     float64  `json:"temperature"`
	TopK            int      `json:"top_k"`
	TopP            float64  `json:"top_p"`
}

// upgrade places each flat field in its group.
func (o legacyConfig) upgrade() Config {
	return Config{
		Model: ModelConfig{Name: o.Model, Layers: o.Layers, Width: o.Width, Heads: o.Heads, Context: o.Context, Dropout: o.Dropout,
			KVHeads: o.KVHeads, Hidden: o.Hidden, Vocab: o.Vocab, Init: o.Init},
		Data: DataConfig{Path: o.Data, Tokenizer: o.Tokenizer, Workers: o.Workers, Prefetch: o.Prefetch, ValSplit: o.ValSplit},
		Optim: OptimConfig{Steps: o.Steps, Epochs: o.Epochs, Batch: o.Batch, LR: o.LR, Name: o.Optim, WD: o.WD, Clip: o.Clip,
			Warmup: o.Warmup, Schedule: o.Schedule, SkipNonFinite: o.SkipNonFinite},
		Precision: PrecisionConfig{AMP: o.AMP, Weights: o.Weights},
		Memory: MemoryConfig{Accum: o.Accum, Checkpoint: o.Checkpoint, LMHead: o.LMHead, LMHeadChunkRows: o.LMHeadChunkRows,
			Freeze: o.Freeze, UnfreezeAt: o.UnfreezeAt, StepInBackward: o.StepInBackward,
			LoRA:    LoRAOptions{Rank: o.LoRA, Alpha: o.LoRAAlpha, Dropout: o.LoRADropout, Targets: o.LoRATargets},
			Offload: OffloadOptions{Mode: o.Offload, Prefetch: o.OffloadPrefetch}},
		Device:   DeviceConfig{Name: o.Device, Without: o.Without, MemLimit: o.MemLimit},
		Parallel: ParallelConfig{Engine: o.Dist, Zero: o.Zero, ZeroPrefetch: o.ZeroPrefetch, Ranks: o.Ranks},
		Output: OutputConfig{EvalEvery: o.EvalEvery, Metrics: o.Metrics, MemReport: o.MemReport, Summary: o.Summary, Save: o.Save,
			SaveEvery: o.SaveEvery, SaveFormat: o.SaveFormat, Resume: o.Resume, Quiet: o.Quiet},
		Generate: GenerateConfig{Tokens: o.Generate, Prompt: o.Prompt, Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP},
		Seed:     o.Seed, Plan: o.Plan, Fit: o.Fit,
	}
}
