package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/memfit/memfit/train"
)

// configs mirror torch_bench.py's workloads.
func configs() map[string]train.Config {
	mlp := train.Default()
	mlp.Data = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(mlp.Data); err != nil {
		mlp.Data = "" // the synthetic task has the same shapes but 32 inputs
	}
	gpt := train.Default()
	gpt.Model, gpt.Layers, gpt.Heads, gpt.Width, gpt.Context, gpt.Batch = "gpt", 6, 6, 384, 256, 16
	gpt.Data = "/usr/share/games/fortunes/fortunes"
	if _, err := os.Stat(gpt.Data); err != nil {
		gpt.Data = ""
	}
	out := map[string]train.Config{"mlp_fp32": mlp, "gpt_fp32": gpt}
	c := gpt
	c.AMP = "bf16"
	out["gpt_bf16"] = c
	c = gpt
	c.Checkpoint = "every"
	out["gpt_ckpt"] = c
	c = gpt
	c.Accum = 4
	out["gpt_accum"] = c
	c = gpt
	c.Freeze = []string{"embed.*", "blocks.[0-2].*"}
	out["gpt_freeze"] = c
	c = gpt
	c.AMP, c.Checkpoint = "bf16", "every"
	out["gpt_bf16_ckpt"] = c
	return out
}

type result struct {
	Config      string  `json:"config"`
	MedianMS    float64 `json:"median_ms"`
	Steps       int     `json:"timed_steps"`
	PeakAct     int64   `json:"peak_activation_bytes"`
	PeakTotal   int64   `json:"peak_total_bytes"`
	FinalLoss   float64 `json:"final_loss"`
	SamplesPerS float64 `json:"samples_per_sec"`
}

func main() {
	names := flag.String("configs", "mlp_fp32,gpt_fp32,gpt_bf16", "comma-separated configurations")
	steps := flag.Int("steps", 10, "timed steps per configuration")
	warmup := flag.Int("warmup", 2, "untimed steps first")
	dev := flag.String("device", "cpu", "device: cpu or cuda (cuda needs a build with -tags cuda)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the timed runs to this file")
	kernels := flag.Bool("kernels", false, "print each kernel's wall time per timed step to standard error")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stepbench:", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "stepbench:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	all := configs()
	for _, name := range strings.Split(*names, ",") {
		cfg, ok := all[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "stepbench: unknown configuration %q\n", name)
			os.Exit(2)
		}
		cfg.Quiet, cfg.EvalEvery, cfg.ValSplit, cfg.Steps, cfg.Device = true, 0, 0, *warmup+*steps, *dev
		cfg = cfg.Resolved()
		dev, err := train.NewDevice(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stepbench:", err)
			os.Exit(2)
		}
		var timed *timedDevice
		if *kernels {
			timed = newTimedDevice(dev)
			dev = timed
		}
		t, err := train.New(cfg, dev, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stepbench:", err)
			os.Exit(2)
		}
		var times []float64
		t.Hooks.AfterStep = func(tr *train.Trainer, r train.Record) error {
			if r.Step > *warmup {
				times = append(times, float64(cfg.Batch)/r.SamplesPerS*1000)
			}
			if timed != nil {
				switch r.Step {
				case *warmup:
					timed.reset()
				case *warmup + *steps:
					timed.stop() // the final evaluation is not a step
				}
			}
			return nil
		}
		s, err := t.Run(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "stepbench:", err)
			os.Exit(1)
		}
		sort.Float64s(times)
		res := result{Config: name, Steps: len(times), PeakAct: s.PeakBytes.Activation, PeakTotal: s.PeakBytes.Total, FinalLoss: s.FinalLoss, SamplesPerS: s.SamplesPerSec}
		if len(times) > 0 {
			res.MedianMS = times[len(times)/2]
		}
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
		if timed != nil {
			fmt.Fprintf(os.Stderr, "%s: kernel wall time per step (median step %.1f ms)\n", name, res.MedianMS)
			timed.report(os.Stderr, len(times))
		}
		t.Close()
	}
}
