package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/parallel"
)

// The planner predicts the peak memory of a configuration without
// training: it builds the same model, optimizer and techniques on the meta
// device — whose allocator accounts every byte exactly as a real device's
// does but whose kernels do nothing — and runs real training steps on
// batches of the right shape. Because the same allocator sees the same
// requests in the same order, the prediction is the measured peak, not an
// estimate; it takes milliseconds even for models far larger than the
// machine.

// planSteps is how many steps a plan traces: the first creates optimizer
// state; the next ones show the steady state (and let a Budget checkpoint
// policy settle).
const planSteps = 3

// shapeBatches delivers zero-filled batches shaped like a dataset's.
type shapeBatches struct {
	ds  *dataset
	cfg Config
	pos data.Position
}

func (s *shapeBatches) Next(context.Context) (*data.Batch, error) {
	b := &data.Batch{Epoch: s.pos.Epoch, Index: s.pos.Batch, Indices: make([]int, s.cfg.Optim.Batch)}
	per := 1
	for _, d := range s.ds.inShape {
		per *= d
	}
	b.InputShape = append([]int{s.cfg.Optim.Batch}, s.ds.inShape...)
	if s.ds.tokens {
		b.Tokens = make([]int32, s.cfg.Optim.Batch*per)
		b.Targets = make([]int32, s.cfg.Optim.Batch*per)
		b.TargetShape = []int{s.cfg.Optim.Batch, per}
	} else {
		b.Inputs = make([]float32, s.cfg.Optim.Batch*per)
		b.Targets = make([]int32, s.cfg.Optim.Batch)
		b.TargetShape = []int{s.cfg.Optim.Batch}
	}
	s.pos.Batch++
	return b, nil
}

func (s *shapeBatches) Position() data.Position    { return s.pos }
func (s *shapeBatches) Seek(p data.Position) error { s.pos = p; return nil }
func (s *shapeBatches) PerEpoch() int              { return max(1, s.ds.train.Len()/s.cfg.Optim.Batch) }

// Plan predicts the peak bytes by category of training with cfg, or with
// Generate set, of generating: the model as -generate builds it, then
// the prompt's forward and one token's at a time through the KV cache
// (category kv_cache), which grows to prompt + Generate tokens.
func Plan(cfg Config) (PeakBytes, error) {
	cfg, _, err := cfg.ApplyInit()
	if err != nil {
		return PeakBytes{}, err
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return PeakBytes{}, err
	}
	ds, err := openData(cfg)
	if err != nil {
		return PeakBytes{}, err
	}
	return planWith(cfg, ds)
}

func planWith(cfg Config, ds *dataset) (PeakBytes, error) {
	cfg.Output.Resume, cfg.Output.Save, cfg.Output.Metrics, cfg.Output.Quiet = "", "", "", true
	// The meta device has every capability; it hides those the target
	// device lacks and those the run leaves out, so that it takes the
	// same paths, and allocates the same bytes, as the run will.
	var (
		dev device.Device = meta.New(0)
		err error
	)
	if hide := append(device.Lacks(cfg.Device.Name), cfg.Device.Without...); len(hide) > 0 {
		dev = device.Without(dev, hide...)
	}
	// With -dist and -ranks N the plan is rank 0's (whose shards are the
	// largest): a communicator that stands for N ranks and exchanges
	// nothing, since the meta device computes no values to exchange.
	var comm parallel.Comm
	if cfg.Parallel.Engine != "off" && cfg.Parallel.Ranks > 0 {
		if comm, err = parallel.NewMeta(0, cfg.Parallel.Ranks); err != nil {
			return PeakBytes{}, err
		}
	}
	t, err := assemble(cfg, dev, ds, &shapeBatches{ds: ds, cfg: cfg}, comm, nil)
	if err != nil {
		return PeakBytes{}, err
	}
	defer t.Close()
	mem := dev.Memory()
	if cfg.Generate.Tokens > 0 {
		// The meta device's logits are zeros: greedy decoding picks token
		// 0 each time, and every token costs what any other would.
		mem.ResetPeak()
		if _, err := t.GenerateText(); err != nil {
			return PeakBytes{}, err
		}
		t.notePeaks(mem.Stats())
		return t.runPeaks, nil
	}
	for i := 0; i < planSteps; i++ {
		b, _ := t.train.Next(context.Background())
		mem.ResetPeak()
		if _, err := t.tryStep(b); err != nil {
			return PeakBytes{}, err
		}
		t.step++
		t.notePeaks(mem.Stats())
	}
	return t.runPeaks, nil
}

// WritePlan renders a prediction as a table.
func WritePlan(w io.Writer, cfg Config, p PeakBytes) {
	if cfg.Generate.Tokens > 0 {
		fmt.Fprintf(w, "memfit plan: %s; generate %d tokens after -prompt", modelKey(cfg), cfg.Generate.Tokens)
	} else {
		fmt.Fprintf(w, "memfit plan: %s; batch %d in %d micro-batch(es); amp %s; checkpoint %s; optimizer %s",
			modelKey(cfg), cfg.Optim.Batch, cfg.Memory.Accum, cfg.Precision.AMP, cfg.Memory.Checkpoint, cfg.Optim.Name)
	}
	if len(cfg.Memory.Freeze) > 0 {
		fmt.Fprintf(w, "; frozen %s", strings.Join(cfg.Memory.Freeze, ","))
	}
	if cfg.Memory.LoRA.Rank > 0 {
		targets := "every Linear layer"
		if len(cfg.Memory.LoRA.Targets) > 0 {
			targets = strings.Join(cfg.Memory.LoRA.Targets, ",")
		}
		fmt.Fprintf(w, "; LoRA rank %d on %s", cfg.Memory.LoRA.Rank, targets)
	}
	if cfg.Memory.StepInBackward {
		fmt.Fprintf(w, "; step in backward")
	}
	if cfg.Precision.Weights == "bf16" {
		fmt.Fprintf(w, "; bf16 weights")
	}
	if cfg.Memory.Offload.Mode != "" && cfg.Memory.Offload.Mode != "off" {
		fmt.Fprintf(w, "; offload %s", cfg.Memory.Offload.Mode)
		if cfg.OffloadsActivations() {
			fmt.Fprintf(w, " (prefetch %d)", cfg.Memory.Offload.Prefetch)
		}
	}
	if cfg.Parallel.Engine != "off" && cfg.Parallel.Ranks > 0 {
		fmt.Fprintf(w, "; one rank of %d, zero %d", cfg.Parallel.Ranks, cfg.Parallel.Zero)
	}
	fmt.Fprintf(w, "\n%-16s %14s\n", "category", "predicted peak")
	rows := []struct {
		name string
		v    int64
	}{
		{memory.Parameter.String(), p.Parameter},
		{memory.Gradient.String(), p.Gradient},
		{memory.OptimizerState.String(), p.OptimizerState},
		{memory.Activation.String(), p.Activation},
		{memory.Temporary.String(), p.Temporary},
		{memory.Data.String(), p.Data},
	}
	if p.KVCache > 0 {
		rows = append(rows, struct {
			name string
			v    int64
		}{memory.KVCache.String(), p.KVCache})
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%-16s %14s\n", r.name, memory.FormatBytes(r.v))
	}
	if cfg.Parallel.Engine != "off" && cfg.Parallel.Ranks > 0 {
		// What ZeRO shards, at its peak together (for ZeRO-3 less than
		// the sum of the rows above: a block is whole only in its turn).
		fmt.Fprintf(w, "%-16s %14s  (parameters + gradients + optimizer state, at one moment)\n", "model state", memory.FormatBytes(p.ModelState))
	}
	fmt.Fprintf(w, "%-16s %14s  (peak of the sum; categories peak at different times)\n", "total", memory.FormatBytes(p.Total))
	if p.HostTotal == 0 {
		return
	}
	fmt.Fprintf(w, "host memory (-offload %s)\n", cfg.Memory.Offload.Mode)
	for _, r := range []struct {
		name string
		v    int64
	}{
		{memory.Parameter.String(), p.HostParameter},
		{memory.Gradient.String(), p.HostGradient},
		{memory.OptimizerState.String(), p.HostOptimizerState},
		{memory.Activation.String(), p.HostActivation},
	} {
		fmt.Fprintf(w, "%-16s %14s\n", r.name, memory.FormatBytes(r.v))
	}
	fmt.Fprintf(w, "%-16s %14s\n", "total", memory.FormatBytes(p.HostTotal))
}

// Choice is a configuration Fit found, with its predicted peak.
type Choice struct {
	Config Config
	Peak   PeakBytes
	Cost   float64 // estimated step time relative to the configuration as given
}

// Fit chooses the cheapest change to cfg whose predicted peak fits budget
// bytes: the optimizer step inside backward (exact and about free, so
// tried first; only without accumulation, fp16, clipping or -dist), more
// micro-batches (about 5% per doubling), bf16 autocast (10%: it changes
// the numerics), activation checkpointing (recompute, about a third more
// compute), and, when cfg plans one rank of several (-dist with -ranks N,
// N > 1), a higher ZeRO stage (exact, like DDP: stages 1 and 2 about as
// cheap as DDP, stage 3 dearer, see zeroCost; never below cfg's stage),
// and their combinations, with the optimizer as given. Only when none of
// those fits does it change the optimizer's state format, the
// approximate methods, in this order (and then, all of them again, with
// parameters stored in bf16, -weights bf16): 8-bit moments (adam →
// adam8bit, adamw → adamw8bit; within 1% of the f32 loss on the GPT
// reference, BENCHMARKS.md) and then adafactor (factored second moment,
// no first moment; within 3%), each again over the same accumulation,
// autocast, checkpointing and ZeRO candidates. SGD is never swapped for
// another algorithm. Last of all it offloads state to host memory
// (-offload all, or activations where the optimizer cannot be offloaded,
// as under -dist): exact, but every step copies activations or gradients
// and parameters over and back. Candidates Config.Validate refuses (ZeRO
// stage 3 with adafactor or bf16 weights, any stage with -unfreeze-at)
// are skipped. It says why when nothing fits.
func Fit(cfg Config, budget int64) (Choice, error) {
	cfg, _, err := cfg.ApplyInit()
	if err != nil {
		return Choice{}, err
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return Choice{}, err
	}
	ds, err := openData(cfg)
	if err != nil {
		return Choice{}, err
	}
	best := Choice{Peak: PeakBytes{Total: math.MaxInt64}}
	weights := []string{cfg.Precision.Weights}
	if (cfg.Precision.Weights == "" || cfg.Precision.Weights == "f32") && cfg.Model.Name != "cnn" && cfg.Parallel.Zero < 3 {
		weights = append(weights, "bf16")
	}
	for _, w := range weights {
		for _, opt := range fitOptimizers(cfg) {
			c := cfg
			c.Precision.Weights = w
			if opt != cfg.Optim.Name {
				c.Optim.Name = opt
				if opt == "adafactor" {
					c.Optim.LR = DefaultLRAdafactor
				}
			}
			found, ok, err := fitWith(c, cfg, ds, budget, &best)
			if err != nil || ok {
				return found, err
			}
		}
	}
	// Last, state in host memory: exact, but every step copies the
	// activations or the gradients and parameters over and back.
	for _, w := range weights {
		for _, opt := range fitOptimizers(cfg) {
			c := cfg
			c.Precision.Weights = w
			if opt != cfg.Optim.Name {
				c.Optim.Name = opt
				if opt == "adafactor" {
					c.Optim.LR = DefaultLRAdafactor
				}
			}
			c, ok := offloadCandidate(c)
			if !ok {
				break
			}
			found, ok, err := fitWith(c, cfg, ds, budget, &best)
			if err != nil || ok {
				return found, err
			}
		}
	}
	flags := fmt.Sprintf("-optim %s -accum %d -checkpoint %s -amp %s", best.Config.Optim.Name, best.Config.Memory.Accum, best.Config.Memory.Checkpoint, best.Config.Precision.AMP)
	if best.Config.Precision.Weights == "bf16" {
		flags += " -weights bf16"
	}
	if best.Config.Memory.Offload.Mode != "" && best.Config.Memory.Offload.Mode != "off" {
		flags += " -offload " + best.Config.Memory.Offload.Mode
	}
	try := "a smaller model, -optim sgd or -freeze"
	if shardable(cfg) {
		flags += fmt.Sprintf(" -zero %d", best.Config.Parallel.Zero)
		// Every stage was tried: only more ranks shrink the shards.
		try += ", or more ranks (-ranks, mpirun -np)"
	} else {
		try += ", or data parallelism: -dist mpi -zero 1, 2 or 3 shard the model state over ranks (plan them with -ranks N)"
	}
	return Choice{}, fmt.Errorf("-fit %s: nothing fits: the smallest predicted peak is %s (%s), of which parameters %s, optimizer state %s; try %s",
		memory.FormatBytes(budget), memory.FormatBytes(best.Peak.Total), flags,
		memory.FormatBytes(best.Peak.Parameter), memory.FormatBytes(best.Peak.OptimizerState), try)
}

// shardable reports whether cfg plans one rank of several, so that Fit
// may raise its ZeRO stage: with one rank (or none given, a plan of one
// process) a shard is the whole.
func shardable(cfg Config) bool { return cfg.Parallel.Engine != "off" && cfg.Parallel.Ranks > 1 }

// zeroStage3Comm is what ZeRO stage 3's communication adds to a step,
// per micro-batch, as a fraction of a DDP step. Each micro-batch
// all-gathers every block before its forward and again before its
// backward, and reduce-scatters its gradients: three model-sized
// transfers where DDP's all-reduce moves two per optimizer step, so 1.5
// times DDP's bytes at one micro-batch, in one small collective per block
// and pass, none overlapped with compute (parallel/doc.go). Where
// communication is about 30% of a DDP step, as over a network it may be,
// the extra half costs 15%. BENCHMARKS.md ("ZeRO-3 ... its cost against
// stage 2") measured less on one machine, where a collective is a memory
// copy: stage 3's throughput at 0.98-1.01 of stage 2's over MPI in quiet
// pairs (0.61-1.52 in noisy ones and with the in-process engine). So 0.15
// is the network's estimate, not this machine's: it keeps stage 3 behind
// stages 1 and 2, more micro-batches and bf16 autocast (1.10), and ahead
// of recomputing activations (1.33), which no measurement of stage 3
// came near.
const zeroStage3Comm = 0.15

// zeroCost is the estimated step time of ZeRO stage z with accum
// micro-batches, relative to DDP's. Stage 1 moves DDP's bytes
// (reduce-scatter + all-gather for the all-reduce); stage 2's reduction
// during backward is an all-reduce, then the all-gather, 1.5 times DDP's
// bytes, but BENCHMARKS.md measured stages 1 and 2 no slower than DDP
// (39.7 and 41.2 samples/s against 39.2): a tie-breaking factor each, so
// that a lower stage, and the run as given, wins when both fit. With
// accumulation stage 2 reduces every micro-batch (its gradients stay
// sharded; stages 0 and 1 communicate once per step): an all-reduce
// each, counted as half of stage 3's transfers. Stage 3 gathers every
// micro-batch, and a recomputed segment gathers its blocks once more, 4
// transfers instead of 3.
func zeroCost(z, accum int, recompute bool) float64 {
	switch z {
	case 1:
		return 1.01
	case 2:
		return 1.02 + zeroStage3Comm*float64(accum-1)/2
	case 3:
		passes := 3.0
		if recompute {
			passes = 4
		}
		return 1 + zeroStage3Comm*float64(accum)*passes/3
	}
	return 1
}

// offloadCandidate is cfg with everything offloaded that its other
// settings allow, or false when it offloads already or can offload
// nothing more.
func offloadCandidate(cfg Config) (Config, bool) {
	if cfg.Memory.Offload.Mode != "" && cfg.Memory.Offload.Mode != "off" {
		return cfg, false
	}
	c := cfg
	c.Memory.Offload.Mode = "all"
	if c.validateOffload() != nil {
		c.Memory.Offload.Mode = "activations"
	}
	return c, true
}

// fitOptimizers lists the optimizers Fit tries, in order: the one asked
// for, then the approximate state formats of the same algorithm family.
func fitOptimizers(cfg Config) []string {
	switch cfg.Optim.Name {
	case "adam":
		return []string{"adam", "adam8bit", "adafactor"}
	case "adamw":
		return []string{"adamw", "adamw8bit", "adafactor"}
	case "adam8bit", "adamw8bit":
		return []string{cfg.Optim.Name, "adafactor"}
	}
	return []string{cfg.Optim.Name}
}

// fitWith tries the accumulation × checkpointing × autocast (× ZeRO
// stage, when cfg is shardable) candidates of cfg in order of estimated
// cost (relative to orig), returning the first that fits and keeping
// the smallest in best. Candidates Config.Validate refuses are skipped.
func fitWith(cfg, orig Config, ds *dataset, budget int64, best *Choice) (Choice, bool, error) {
	var cands []Choice
	amps := []string{cfg.Precision.AMP}
	if cfg.Precision.AMP == "off" {
		amps = append(amps, "bf16")
	}
	ckpts := []string{cfg.Memory.Checkpoint}
	if cfg.Memory.Checkpoint == "off" && cfg.Model.Name != "cnn" {
		ckpts = append(ckpts, "sqrt", "every")
	}
	// Never below the stage asked for: the user may know what the plan
	// does not (the interconnect, other jobs on the devices).
	zeros := []int{cfg.Parallel.Zero}
	if shardable(cfg) {
		for z := cfg.Parallel.Zero + 1; z <= 3; z++ {
			zeros = append(zeros, z)
		}
	}
	origZero := zeroCost(orig.Parallel.Zero, orig.Memory.Accum, orig.Memory.Checkpoint != "off")
	for accum := cfg.Memory.Accum; accum <= cfg.Optim.Batch; accum *= 2 {
		for _, ck := range ckpts {
			for _, a := range amps {
				sibs := []bool{cfg.Memory.StepInBackward}
				if !cfg.Memory.StepInBackward && accum == 1 && a != "fp16" && cfg.Optim.Clip == 0 && cfg.Parallel.Engine == "off" && !cfg.OffloadsOptimizer() {
					sibs = append(sibs, true)
				}
				for _, sib := range sibs {
					for _, z := range zeros {
						c := cfg
						c.Memory.Accum, c.Memory.Checkpoint, c.Precision.AMP, c.Memory.StepInBackward, c.Parallel.Zero = accum, ck, a, sib, z
						if c.Validate() != nil {
							continue
						}
						cost := 1 + 0.05*math.Log2(float64(accum)/float64(orig.Memory.Accum))
						if sib != orig.Memory.StepInBackward {
							// Exact and free; the tie goes to the run as given.
							cost *= 1.01
						}
						if ck != orig.Memory.Checkpoint {
							cost *= 1.33
						}
						if a != orig.Precision.AMP {
							// Changes the numerics, and on the CPU backend bf16
							// steps are not yet faster than f32 (BENCHMARKS.md).
							cost *= 1.10
						}
						cost *= zeroCost(z, accum, ck != "off") / origZero
						cands = append(cands, Choice{Config: c, Cost: cost})
					}
				}
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Cost < cands[j].Cost })
	for _, c := range cands {
		p, err := planWith(c.Config, ds)
		if err != nil {
			return Choice{}, false, err
		}
		c.Peak = p
		if p.Total <= budget {
			return c, true, nil
		}
		if p.Total < best.Peak.Total {
			*best = c
		}
	}
	return Choice{}, false, nil
}
