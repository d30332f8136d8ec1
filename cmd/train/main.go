package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/memfit/memfit/device"
	_ "github.com/memfit/memfit/device/cuda" // registers "cuda" (without the cuda tag, its opener says how to rebuild)
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/train"
)

func main() {
	if code, ok := supervise(); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command, testable without a process: parse the flags
// into a Config, join the ranks of -dist, choose techniques for -fit,
// plan, or build the trainer and train.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer internalError(&code, stderr)
	cfg, code, ok := parse(args, stdout, stderr)
	if !ok {
		return code
	}
	comm, stdout, stderr, err := joinGroup(&cfg, stdout, stderr)
	if err != nil {
		return fail(stderr, 2, err)
	}
	fail := func(stderr io.Writer, code int, err error) int { return failCtx(ctx, stderr, code, err) }
	if comm != nil {
		defer comm.Close()
	}
	if n := cfg.Data.ShowExamples; n > 0 {
		return exit(ctx, stderr, 2, train.ShowExamples(cfg, stdout, n))
	}
	if cfg.Fit > 0 {
		chosen, err := fit(ctx, cfg, comm, stdout, stderr)
		if err != nil || cfg.Plan {
			return exit(ctx, stderr, 2, err)
		}
		cfg = chosen
	}
	if cfg.Plan {
		defer planGC()()
		p, err := train.PlanContext(ctx, cfg)
		if err != nil {
			return fail(stderr, 2, err)
		}
		train.WritePlan(stdout, cfg, p)
		if err := writePlanSummary(cfg, p); err != nil {
			return fail(stderr, 1, err)
		}
		return 0
	}
	dev, comm, err := openDevice(cfg, comm)
	if err != nil {
		return fail(stderr, 2, err)
	}
	t, err := train.NewDistributedContext(ctx, cfg, dev, comm, stderr)
	if err != nil {
		return fail(stderr, 2, err)
	}
	defer t.Close()
	if cfg.Generate.Tokens > 0 {
		return generate(ctx, t, stdout, stderr)
	}
	if code, done := nothingToTrain(t, stderr); done {
		return code
	}
	if err := t.CheckData(); err != nil {
		return fail(stderr, 2, err)
	}
	if !cfg.Output.Quiet && (comm == nil || comm.Rank() == 0) {
		where := dev.Name()
		if comm != nil {
			where = fmt.Sprintf("%d ranks of %s", comm.Size(), dev.Name())
		}
		fmt.Fprintf(stderr, "%s: %d parameters on %s\n", cfg.Model.Name, count(t), where)
	}
	sum, err := t.Run(ctx)
	switch {
	case errors.Is(err, train.ErrInterrupted):
		fmt.Fprintf(stderr, "train: %v\n", err)
		code = 130
	case err != nil:
		return fail(stderr, 1, err)
	}
	if err := writeOutputs(t, sum, code); err != nil {
		return fail(stderr, 1, err)
	}
	if code == 0 {
		report(stdout, cfg, sum)
	}
	return code
}

// parse reads the flags into a Config (with -init's model applied and
// defaults resolved) and checks it and its paths; ok false means exit
// with code (0 after -h).
func parse(args []string, stdout, stderr io.Writer) (cfg train.Config, code int, ok bool) {
	cfg = train.Default()
	fs := train.NewFlags("train", &cfg)
	fs.SetOutput(io.Discard) // errors are reported below, in one line
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return cfg, 0, false
		}
		fmt.Fprintf(stderr, "train: %v (see train -h)\n", err)
		return cfg, 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "train: unexpected argument %q (flags only; see -h)\n", fs.Arg(0))
		return cfg, 2, false
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	cfg, note, err := cfg.ApplyInitSet(func(flag string) bool { return given[flag] })
	if err != nil {
		return cfg, fail(stderr, 2, err), false
	}
	if note != "" {
		fmt.Fprintln(stderr, note)
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return cfg, fail(stderr, 2, err), false
	}
	if err := cfg.CheckPaths(); err != nil {
		return cfg, fail(stderr, 2, err), false
	}
	return cfg, 0, true
}

// usage prints the command's help: every flag, grouped by concern.
func usage(fs *train.Flags) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: train [flags]\n\nTrains a model with memory-saving techniques and reports where every byte goes.\nWith no flags it trains the reference MLP on an embedded synthetic task.\n")
	fs.PrintDefaults(w)
}

// joinGroup joins the ranks of -dist mpi (not to plan): rank 0 speaks for
// the group; the others report only their own errors, prefixed with
// their rank, and write no summary or report.
func joinGroup(cfg *train.Config, stdout, stderr io.Writer) (parallel.Comm, io.Writer, io.Writer, error) {
	if cfg.Parallel.Engine != "mpi" || cfg.Plan {
		return nil, stdout, stderr, nil
	}
	c, err := parallel.NewMPI()
	if err != nil {
		return nil, stdout, stderr, fmt.Errorf("-dist mpi: %v", err)
	}
	if c.Rank() != 0 {
		stdout = io.Discard
		stderr = prefixed{stderr, fmt.Sprintf("rank %d: ", c.Rank())}
		cfg.Output.Summary, cfg.Output.MemReport = "", ""
	}
	return c, stdout, stderr, nil
}

// planGC lets the heap grow to five times what survives a collection
// (GOGC=400) while plans are traced, unless $GOGC says otherwise, and
// returns the function that restores the setting. A plan makes millions
// of small, short-lived objects (tensors, views, graph nodes) over a live
// heap of tens of MiB, and at the default the collector took about a
// third of -fit's time; -fit's heap stays under 60 MiB at 400.
func planGC() (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(400)
	return func() { debug.SetGCPercent(old) }
}

// fit chooses techniques for -fit and prints the choice as flags, with
// its plan under -plan.
func fit(ctx context.Context, cfg train.Config, comm parallel.Comm, stdout, stderr io.Writer) (train.Config, error) {
	fc := cfg
	if comm != nil && fc.Parallel.Ranks == 0 {
		// Under mpirun: plan one rank of this job (every rank plans
		// alike and chooses the same).
		fc.Parallel.Ranks = comm.Size()
	}
	done := make(chan struct{})
	go fitProgress(done, stderr, cfg.Fit, comm == nil || comm.Rank() == 0)
	restore := planGC()
	c, err := train.FitContext(ctx, fc, cfg.Fit)
	restore()
	close(done)
	if err != nil {
		return cfg, err
	}
	c.Config.Parallel.Ranks = cfg.Parallel.Ranks
	fmt.Fprintf(stdout, "fit %s: %s (predicted peak %s)\n", memory.FormatBytes(cfg.Fit), c.Flags(cfg), memory.FormatBytes(c.Need()))
	if cfg.Plan {
		// -fit SIZE -plan: the chosen flags and their plan, no training.
		train.WritePlan(stdout, c.Config, c.Peak)
		if err := writePlanSummary(c.Config, c.Peak); err != nil {
			return cfg, err
		}
	}
	return c.Config, nil
}

// A planSummary is what -summary holds for -plan: the predicted peaks to
// the byte, under the keys a run's summary gives its measured ones, so
// that scripts compare the two without parsing -plan's rounded table.
type planSummary struct {
	Planned   bool            `json:"planned"`
	PeakBytes train.PeakBytes `json:"peak_bytes"`
}

// writePlanSummary writes -plan's summary to -summary's file, if one was
// given.
func writePlanSummary(cfg train.Config, p train.PeakBytes) error {
	if cfg.Output.Summary == "" {
		return nil
	}
	return writeJSON(cfg.Output.Summary, planSummary{Planned: true, PeakBytes: p})
}

// fitProgress says on stderr that -fit is still searching, once it has
// taken a second and then every ten, until done is closed: a search at a
// long context plans many candidates.
func fitProgress(done <-chan struct{}, stderr io.Writer, budget int64, lead bool) {
	if !lead {
		return
	}
	start := time.Now()
	wait := time.Second
	for {
		select {
		case <-done:
			return
		case <-time.After(wait - time.Since(start)%wait):
		}
		fmt.Fprintf(stderr, "fit %s: searching, %s so far\n", memory.FormatBytes(budget), time.Since(start).Round(time.Second))
		wait = 10 * time.Second
	}
}

// openDevice opens the run's device (a rank's GPU under mpirun), refuses
// a run whose one-example step cannot fit it, has GPU ranks talk through
// NCCL, and records the allocator's history for -mem-report.
func openDevice(cfg train.Config, comm parallel.Comm) (device.Device, parallel.Comm, error) {
	dev, err := train.NewDeviceOrdinal(cfg, localRank())
	if err != nil {
		return nil, comm, err
	}
	if err := train.Preflight(cfg, dev.Memory().Capacity()); err != nil {
		return nil, comm, err
	}
	if comm != nil && cfg.Device.Name == "cuda" {
		// GPU ranks talk through NCCL; MPI only introduced them.
		nc, err := parallel.NewNCCL(comm, dev)
		if err != nil {
			return nil, comm, fmt.Errorf("-dist mpi -device cuda: %v", err)
		}
		comm = nc
	}
	if cfg.Output.MemReport != "" {
		dev.Memory().EnableHistory(1 << 20)
		tensor.EnableAllocSites(dev.Memory())
	}
	return dev, comm, nil
}

// generate prints -prompt's continuation.
func generate(ctx context.Context, t *train.Trainer, stdout, stderr io.Writer) int {
	text, err := t.GenerateText()
	if err != nil {
		return failCtx(ctx, stderr, 2, err)
	}
	if t.Config.Output.Resume == "" && t.Config.Model.Init == "" {
		fmt.Fprintln(stderr, "train: warning: -generate without -resume or -init sampled from untrained weights")
	}
	fmt.Fprintln(stdout, text)
	return 0
}

// nothingToTrain handles a run that is already at its end: a resumed
// one exported in Hugging Face's layout, or an error saying why there is
// nothing to do.
func nothingToTrain(t *train.Trainer, stderr io.Writer) (int, bool) {
	cfg := t.Config
	switch {
	case t.Step() < t.Total():
		return 0, false
	case cfg.Output.Resume != "" && cfg.Output.SaveFormat == "hf" && cfg.Output.Save != "":
		// Nothing to train, something to export: the resumed model in
		// Hugging Face's layout (adapters merged).
		if err := t.Save(cfg.Output.Save); err != nil {
			return fail(stderr, 1, err), true
		}
		fmt.Fprintf(stderr, "train: exported %s at step %d to %s (Hugging Face layout)\n", cfg.Output.Resume, t.Step(), cfg.Output.Save)
		return 0, true
	case cfg.Output.Resume != "":
		return fail(stderr, 2, fmt.Errorf("-resume %s is at step %d and the run ends at step %d: nothing to train (raise -steps)", cfg.Output.Resume, t.Step(), t.Total())), true
	}
	return fail(stderr, 2, fmt.Errorf("-epochs %d of -batch %d: no full batch in the data, nothing to train", cfg.Optim.Epochs, cfg.Optim.Batch)), true
}

// writeOutputs writes -summary and -mem-report (with -offload also the
// host memory's). Run saved the final state before returning; an output
// that fails now says so, since that state is what the user has left.
func writeOutputs(t *train.Trainer, sum train.Summary, code int) error {
	cfg := t.Config
	saved := func(err error) error {
		if cfg.Output.Save == "" || code != 0 {
			return err
		}
		return fmt.Errorf("%v (the trained state was saved to %s)", err, cfg.Output.Save)
	}
	if cfg.Output.Summary != "" {
		if err := writeJSON(cfg.Output.Summary, sum); err != nil {
			return saved(fmt.Errorf("-summary %v", err))
		}
	}
	if cfg.Output.MemReport != "" {
		if err := train.WriteMemoryReport(cfg.Output.MemReport, t.Device.Memory()); err != nil {
			return saved(fmt.Errorf("-mem-report %v", err))
		}
		if path, host := cfg.HostMemReport(), t.Host(); path != "" && host != nil {
			if err := train.WriteMemoryReport(path, host.Memory()); err != nil {
				return saved(fmt.Errorf("-mem-report (host memory) %v", err))
			}
		}
	}
	return nil
}

// report prints the run's last line: steps, losses, speed and peak.
func report(stdout io.Writer, cfg train.Config, sum train.Summary) {
	line := fmt.Sprintf("steps %d, final loss %.4f, eval loss %.4f", sum.Steps, sum.FinalLoss, sum.Eval.Loss)
	if sum.Eval.Examples == 0 {
		line = fmt.Sprintf("steps %d, final loss %.4f, no evaluation (no held-out data)", sum.Steps, sum.FinalLoss)
	}
	if sum.Eval.Accuracy != nil {
		line += fmt.Sprintf(", eval accuracy %.2f%%", 100**sum.Eval.Accuracy)
	}
	fmt.Fprintf(stdout, "%s, %.0f samples/s, peak %s\n", line, sum.SamplesPerSec, memory.FormatBytes(sum.PeakBytes.Total))
	def := train.Default()
	if cfg.Data.Path == "" && cfg.Model.Name == def.Model.Name && sum.Eval.Accuracy != nil && !cfg.Output.Quiet {
		fmt.Fprintln(stdout, defaultTaskNote)
	}
}

// defaultTaskNote says what the accuracy of a run on the embedded task
// means. Measured with the default flags (-epochs 1, 5 and 20).
const defaultTaskNote = "(the embedded task is 10 synthetic spiral arms: chance is 10%; the default MLP reaches about 62% in its one epoch, 87% with -epochs 5 and 91% with -epochs 20; real data: -data /usr/share/datasets/fashion-mnist)"

// fail prints err and returns code.
func fail(stderr io.Writer, code int, err error) int {
	fmt.Fprintf(stderr, "train: %v\n", err)
	return code
}

// failCtx is fail, except for a computation stopped by a signal (ctx
// cancelled) before training began: nothing to save, status 130.
func failCtx(ctx context.Context, stderr io.Writer, code int, err error) int {
	if ctx.Err() != nil {
		// Whatever failed once the signal came failed of it: an
		// interrupted allocation, a read cut short.
		fmt.Fprintf(stderr, "train: interrupted, nothing to save (%v)\n", err)
		return 130
	}
	return fail(stderr, code, err)
}

// exit is failCtx for an error that may be nil (status 0 then).
func exit(ctx context.Context, stderr io.Writer, code int, err error) int {
	if err == nil {
		return 0
	}
	return failCtx(ctx, stderr, code, err)
}

// localRank is this process's rank among those mpirun started on this
// machine (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK), which picks its GPU; 0
// outside mpirun.
func localRank() int {
	r, err := strconv.Atoi(os.Getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
	if err != nil || r < 0 {
		return 0
	}
	return r
}

// prefixed writes every Write's bytes after a prefix (error lines of a
// rank other than 0).
type prefixed struct {
	w      io.Writer
	prefix string
}

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

func count(t *train.Trainer) int {
	n := 0
	for _, p := range t.Model.Parameters() {
		n += p.Len()
	}
	return n
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return train.WriteFileAtomic(path, append(b, '\n'))
}
