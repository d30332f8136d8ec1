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
	_ "github.com/memfit/memfit/device/cuda" // registers "cuda" (without the cuda tag, its opener says how to rebuild)
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/train"
)

// workloads mirror torch_bench.py's, as the train command's flags.
var workloads = []struct{ name, flags string }{
	{"mlp_fp32", ""},
	{"gpt_fp32", "-model gpt -layers 6 -heads 6 -width 384 -context 256 -batch 16"},
	{"gpt_bf16", "-model gpt -layers 6 -heads 6 -width 384 -context 256 -batch 16 -amp bf16"},
	{"gpt_ckpt", "-model gpt -layers 6 -heads 6 -width 384 -context 256 -batch 16 -checkpoint every"},
	{"gpt_accum", "-model gpt -layers 6 -heads 6 -width 384 -context 256 -batch 16 -accum 4"},
	{"gpt_freeze", "-model gpt -layers 6 -heads 6 -width 384 -context 256 -batch 16 -freeze embed.*,blocks.[0-2].*"},
	{"gpt_bf16_ckpt", "-model gpt -layers 6 -heads 6 -width 384 -context 256 -batch 16 -amp bf16 -checkpoint every"},
	// The fused-attention issue's long-context case.
	{"gpt_bf16_ctx1024", "-model gpt -layers 6 -heads 6 -width 384 -context 1024 -batch 4 -amp bf16"},
}

// configs are the workloads as Configs, on real data where this machine
// has it: Fashion-MNIST for the MLP (the synthetic task has the same
// shapes but 32 inputs), Debian's fortunes for the GPTs.
func configs() map[string]train.Config {
	data := map[bool]string{false: "/usr/share/datasets/fashion-mnist", true: "/usr/share/games/fortunes/fortunes"}
	out := map[string]train.Config{}
	for _, w := range workloads {
		cfg := train.Default()
		if err := train.NewFlags(w.name, &cfg).Parse(strings.Fields(w.flags)); err != nil {
			panic(fmt.Sprintf("stepbench: workload %s: %v", w.name, err))
		}
		k, _ := models.KindOf(cfg.Model.Name)
		if _, err := os.Stat(data[k.Tokens]); err == nil {
			cfg.Data.Path = data[k.Tokens]
		}
		out[w.name] = cfg
	}
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
