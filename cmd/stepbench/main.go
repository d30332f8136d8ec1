package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda" // registers "cuda" (without the cuda tag, its opener says how to rebuild)
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
// shapes but 32 inputs), Debian's fortunes for the GPTs. with are train
// flags applied after each workload's own (the later of two settings of
// a flag wins).
func configs(with []string) (map[string]train.Config, error) {
	data := map[bool]string{false: "/usr/share/datasets/fashion-mnist", true: "/usr/share/games/fortunes/fortunes"}
	out := map[string]train.Config{}
	for _, w := range workloads {
		cfg := train.Default()
		fs := train.NewFlags(w.name, &cfg)
		fs.SetOutput(io.Discard)
		if err := fs.Parse(append(strings.Fields(w.flags), with...)); err != nil {
			return nil, fmt.Errorf("workload %s with -with %q: %v", w.name, strings.Join(with, " "), err)
		}
		if fs.NArg() > 0 {
			return nil, fmt.Errorf("-with %q: unexpected argument %q (train flags only)", strings.Join(with, " "), fs.Arg(0))
		}
		k, _ := models.KindOf(cfg.Model.Name)
		if _, err := os.Stat(data[k.Tokens]); err == nil && cfg.Data.Path == "" {
			cfg.Data.Path = data[k.Tokens]
		}
		out[w.name] = cfg
	}
	return out, nil
}

// options are stepbench's flags.
type options struct {
	configs    []string
	steps      int
	warmup     int
	device     string
	cpuProfile string
	kernels    bool
	without    []string
	compare    []string
	rounds     int
	with       []string
	// workloads are the configurations named by configs, -with applied.
	workloads map[string]train.Config
}

// newFlagSet binds stepbench's flags to o.
func newFlagSet(o *options) (*flag.FlagSet, *string, *string, *string, *string) {
	fs := flag.NewFlagSet("stepbench", flag.ContinueOnError)
	names := fs.String("configs", "mlp_fp32,gpt_fp32,gpt_bf16", "comma-separated configurations: "+workloadNames())
	fs.IntVar(&o.steps, "steps", 10, "timed steps per configuration")
	fs.IntVar(&o.warmup, "warmup", 2, "untimed steps first")
	fs.StringVar(&o.device, "device", "cpu", "device: cpu or cuda (cuda needs a build with -tags cuda, or -tags cudaemu for the CPU emulator)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the timed runs to this file")
	fs.BoolVar(&o.kernels, "kernels", false, "print, per timed step, each kernel's wall time to standard error; on a GPU, the GPU's time in each kernel, product and copy from timing events, grouped (dequantization, LoRA's and the base's products, attention, copies, the GPU waiting for the host) with the host's waits; on the CUDA emulator (-tags cudaemu), each CUDA kernel's launches and the bytes it reads and writes, and the cuBLAS calls")
	without := fs.String("without", "", "comma-separated device capabilities to hide (their composed fallbacks run): "+strings.Join(device.Capabilities, ", "))
	compare := fs.String("compare", "", "comma-separated capabilities: run each configuration alternately with and without them, -rounds times, and print the ratio of the median steps")
	fs.IntVar(&o.rounds, "rounds", 3, "alternations for -compare")
	with := fs.String("with", "", "train flags applied after each configuration's own, e.g. \"-layers 2 -context 64 -batch 4\" (small shapes for the CUDA emulator)")
	return fs, names, without, compare, with
}

// parseFlags reads stepbench's command line (without the program name).
// It returns flag.ErrHelp after -h, having printed the usage to out.
func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs, names, without, compare, with := newFlagSet(&o)
	fs.SetOutput(out)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	}
	if o.steps < 1 || o.warmup < 0 || o.rounds < 1 {
		return o, fmt.Errorf("-steps %d, -warmup %d, -rounds %d: want at least 1, 0 and 1", o.steps, o.warmup, o.rounds)
	}
	o.without, o.compare, o.configs, o.with = split(*without), split(*compare), split(*names), strings.Fields(*with)
	for _, list := range [][]string{o.without, o.compare} {
		for _, c := range list {
			if !slices.Contains(device.Capabilities, c) {
				return o, fmt.Errorf("unknown capability %q (want %s)", c, strings.Join(device.Capabilities, ", "))
			}
		}
	}
	all, err := configs(o.with)
	if err != nil {
		return o, err
	}
	if len(o.configs) == 0 {
		return o, errors.New("-configs: no configuration")
	}
	o.workloads = map[string]train.Config{}
	for _, name := range o.configs {
		cfg, ok := all[name]
		if !ok {
			return o, fmt.Errorf("-configs: unknown configuration %q (want %s)", name, workloadNames())
		}
		o.workloads[name] = cfg
	}
	return o, nil
}

func workloadNames() string {
	var n []string
	for _, w := range workloads {
		n = append(n, w.name)
	}
	return strings.Join(n, ", ")
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepbench:", err)
		os.Exit(2)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
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
	for _, name := range o.configs {
		cfg := o.workloads[name]
		cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Data.ValSplit, cfg.Optim.Steps, cfg.Device.Name = true, 0, 0, o.warmup+o.steps, o.device
		cfg = cfg.Resolved()
		if len(o.compare) == 0 {
			res := measure(name, cfg, o.without, o.warmup, o.steps, o.kernels)
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
			continue
		}
		// The two variants alternate so that the machine's drift falls on
		// both alike.
		var with, hidden []float64
		for range o.rounds {
			with = append(with, measure(name, cfg, o.without, o.warmup, o.steps, false).MedianMS)
			hidden = append(hidden, measure(name, cfg, append(slices.Clone(o.without), o.compare...), o.warmup, o.steps, false).MedianMS)
		}
		a, b := median(with), median(hidden)
		out, _ := json.Marshal(map[string]any{"config": name, "median_ms": a, "median_ms_without": b, "without": strings.Join(o.compare, ","), "ratio": a / b, "rounds": o.rounds})
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

type result struct {
	Config      string  `json:"config"`
	MedianMS    float64 `json:"median_ms"`
	Steps       int     `json:"timed_steps"`
	PeakAct     int64   `json:"peak_activation_bytes"`
	PeakTotal   int64   `json:"peak_total_bytes"`
	FinalLoss   float64 `json:"final_loss"`
	SamplesPerS float64 `json:"samples_per_sec"`
}

// measure trains cfg for warmup+steps steps with the capabilities named in
// hide hidden and reports the median timed step.
func measure(name string, cfg train.Config, hide []string, warmup, steps int, kernels bool) result {
	dev, err := train.NewDevice(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepbench:", err)
		os.Exit(2)
	}
	// On the CUDA emulator the table is of CUDA launches and their
	// traffic (emulated wall time means nothing); elsewhere of kernel
	// wall time.
	counted, _ := device.As[launchCounter](dev)
	if counted != nil && !counted.CountsLaunches() {
		counted = nil
	}
	// On a GPU, of the GPU's time from timing events.
	var profiler gpuProfiler
	if kernels && counted == nil {
		profiler, _ = device.As[gpuProfiler](dev)
	}
	var timed *timedDevice
	if kernels && counted == nil && profiler == nil {
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
	var traffic *launchTable
	var profile *cuda.Profile
	var profErr error
	t.Hooks.AfterStep = func(tr *train.Trainer, r train.Record) error {
		if r.Step > warmup {
			times = append(times, float64(cfg.Optim.Batch)/r.SamplesPerS*1000)
		}
		switch r.Step {
		case warmup:
			if timed != nil {
				timed.reset()
			}
			if kernels && counted != nil {
				counted.ResetLaunchCounts()
			}
			if profiler != nil {
				profErr = profiler.StartProfile()
			}
		case warmup + steps:
			if timed != nil {
				timed.stop() // the final evaluation is not a step
			}
			if kernels && counted != nil {
				traffic = newLaunchTable(counted.LaunchCounts())
			}
			if profiler != nil && profErr == nil {
				p, err := profiler.Profile()
				profile, profErr = &p, err
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
	if profErr != nil {
		fmt.Fprintf(os.Stderr, "%s: GPU profile: %v\n", name, profErr)
	} else if profile != nil {
		fmt.Fprintf(os.Stderr, "%s: GPU profile per step (median step %.1f ms, %d timed steps)\n", name, res.MedianMS, len(times))
		reportProfile(os.Stderr, *profile, len(times), 40)
	}
	if ml, ok := device.As[moduleLoader](dev); ok && kernels {
		fmt.Fprintf(os.Stderr, "%s: kernels %s\n", name, describeLoad(ml.ModuleLoad()))
	}
	if traffic != nil {
		fmt.Fprintf(os.Stderr, "%s: CUDA launches and traffic per step on the emulator (%d timed steps)\n", name, len(times))
		traffic.report(os.Stderr, len(times))
	}
	return res
}
