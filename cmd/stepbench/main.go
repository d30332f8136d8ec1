package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/train"
)

// configs mirror torch_bench.py's workloads.
func configs() map[string]train.Config {
	mlp := train.Default()
	mlp.Data.Path = "/usr/share/datasets/fashion-mnist"
	if _, err := os.Stat(mlp.Data.Path); err != nil {
		mlp.Data.Path = "" // the synthetic task has the same shapes but 32 inputs
	}
	gpt := train.Default()
	gpt.Model.Name, gpt.Model.Layers, gpt.Model.Heads, gpt.Model.Width, gpt.Model.Context, gpt.Optim.Batch = "gpt", 6, 6, 384, 256, 16
	gpt.Data.Path = "/usr/share/games/fortunes/fortunes"
	if _, err := os.Stat(gpt.Data.Path); err != nil {
		gpt.Data.Path = ""
	}
	out := map[string]train.Config{"mlp_fp32": mlp, "gpt_fp32": gpt}
	c := gpt
	c.Precision.AMP = "bf16"
	out["gpt_bf16"] = c
	c = gpt
	c.Memory.Checkpoint = "every"
	out["gpt_ckpt"] = c
	c = gpt
	c.Memory.Accum = 4
	out["gpt_accum"] = c
	c = gpt
	c.Memory.Freeze = []string{"embed.*", "blocks.[0-2].*"}
	out["gpt_freeze"] = c
	c = gpt
	c.Precision.AMP, c.Memory.Checkpoint = "bf16", "every"
	out["gpt_bf16_ckpt"] = c
	c = gpt // the fused-attention issue's long-context case
	c.Precision.AMP, c.Model.Context, c.Optim.Batch = "bf16", 1024, 4
	out["gpt_bf16_ctx1024"] = c
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
	without := flag.String("without", "", "comma-separated device capabilities to hide (their composed fallbacks run): "+strings.Join(device.Capabilities, ", "))
	compare := flag.String("compare", "", "comma-separated capabilities: run each configuration alternately with and without them, -rounds times, and print the ratio of the median steps")
	rounds := flag.Int("rounds", 3, "alternations for -compare")
	flag.Parse()
	for _, list := range []string{*without, *compare} {
		for _, c := range split(list) {
			if !slices.Contains(device.Capabilities, c) {
				fmt.Fprintf(os.Stderr, "stepbench: unknown capability %q (want %s)\n", c, strings.Join(device.Capabilities, ", "))
				os.Exit(2)
			}
		}
	}
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
		cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Optim.Steps, cfg.Device.Name = true, 0, 0, *warmup+*steps, *dev
		cfg = cfg.Resolved()
		if *compare == "" {
			res := measure(name, cfg, split(*without), *warmup, *steps, *kernels)
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
			continue
		}
		// The two variants alternate so that the machine's drift falls on
		// both alike.
		var with, hidden []float64
		for range *rounds {
			with = append(with, measure(name, cfg, split(*without), *warmup, *steps, false).MedianMS)
			hidden = append(hidden, measure(name, cfg, append(split(*without), split(*compare)...), *warmup, *steps, false).MedianMS)
		}
		a, b := median(with), median(hidden)
		out, _ := json.Marshal(map[string]any{"config": name, "median_ms": a, "median_ms_without": b, "without": *compare, "ratio": a / b, "rounds": *rounds})
		fmt.Println(string(out))
	}
}

func split(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

func median(x []float64) float64 {
	x = slices.Clone(x)
	sort.Float64s(x)
	return x[len(x)/2]
}

// measure trains cfg for warmup+steps steps with the capabilities named in
// hide hidden and reports the median timed step.
func measure(name string, cfg train.Config, hide []string, warmup, steps int, kernels bool) result {
	dev, err := train.NewDevice(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepbench:", err)
		os.Exit(2)
	}
	var timed *timedDevice
	if kernels {
		timed = newTimedDevice(dev)
		dev = timed.visible()
	}
	if len(hide) > 0 {
		dev = device.Without(dev, hide...)
	}
	t, err := train.New(cfg, dev, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepbench:", err)
		os.Exit(2)
	}
	defer t.Close()
	var times []float64
	t.Hooks.AfterStep = func(tr *train.Trainer, r train.Record) error {
		if r.Step > warmup {
			times = append(times, float64(cfg.Optim.Batch)/r.SamplesPerS*1000)
		}
		if timed != nil {
			switch r.Step {
			case warmup:
				timed.reset()
			case warmup + steps:
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
	res := result{Config: name, Steps: len(times), PeakAct: s.PeakBytes.Activation, PeakTotal: s.PeakBytes.Total, FinalLoss: s.FinalLoss, SamplesPerS: s.SamplesPerSec}
	if len(times) > 0 {
		res.MedianMS = median(times)
	}
	if timed != nil {
		fmt.Fprintf(os.Stderr, "%s: kernel wall time per step (median step %.1f ms)\n", name, res.MedianMS)
		timed.report(os.Stderr, len(times))
	}
	return res
}
