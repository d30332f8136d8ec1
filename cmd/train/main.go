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
	"strconv"
	"syscall"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
	"github.com/memfit/memfit/train"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command, testable without a process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := train.Default()
	fs := newFlagSet(&cfg, io.Discard) // errors are reported below, in one line
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		fmt.Fprintf(stderr, "train: %v (see train -h)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "train: unexpected argument %q (flags only; see -h)\n", fs.Arg(0))
		return 2
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "train: %v\n", err)
		return code
	}
	cfg, note, err := cfg.ApplyInit()
	if err != nil {
		return fail(2, err)
	}
	if note != "" {
		fmt.Fprintln(stderr, note)
	}
	cfg = cfg.Resolved()
	if err := cfg.Validate(); err != nil {
		return fail(2, err)
	}
	if err := cfg.CheckPaths(); err != nil {
		return fail(2, err)
	}
	var comm parallel.Comm
	if cfg.Parallel.Engine == "mpi" && !cfg.Plan {
		c, err := parallel.NewMPI()
		if err != nil {
			return fail(2, fmt.Errorf("-dist mpi: %v", err))
		}
		defer c.Close()
		comm = c
		if c.Rank() != 0 {
			// Rank 0 speaks for the group; the others report only their
			// own errors, prefixed with their rank.
			stdout = io.Discard
			stderr = prefixed{stderr, fmt.Sprintf("rank %d: ", c.Rank())}
			cfg.Output.Summary, cfg.Output.MemReport = "", ""
		}
	}
	if cfg.Fit > 0 {
		fc := cfg
		if comm != nil && fc.Parallel.Ranks == 0 {
			// Under mpirun: plan one rank of this job (every rank
			// plans alike and chooses the same).
			fc.Parallel.Ranks = comm.Size()
		}
		c, err := train.Fit(fc, cfg.Fit)
		if err != nil {
			return fail(2, err)
		}
		c.Config.Parallel.Ranks = cfg.Parallel.Ranks
		optFlag := ""
		if c.Config.Optim.Name != cfg.Optim.Name {
			optFlag = fmt.Sprintf("-optim %s -lr %g ", c.Config.Optim.Name, c.Config.Optim.LR)
		}
		if c.Config.Memory.StepInBackward && !cfg.Memory.StepInBackward {
			optFlag += "-step-in-backward "
		}
		if c.Config.Precision.Weights != cfg.Precision.Weights && c.Config.Precision.Weights == "bf16" {
			optFlag += "-weights bf16 "
		}
		if c.Config.Memory.Offload.Mode != cfg.Memory.Offload.Mode {
			optFlag += "-offload " + c.Config.Memory.Offload.Mode + " "
		}
		if c.Config.Parallel.Zero != cfg.Parallel.Zero {
			optFlag += fmt.Sprintf("-zero %d ", c.Config.Parallel.Zero)
		}
		fmt.Fprintf(stdout, "fit %s: %s-accum %d -checkpoint %s -amp %s (predicted peak %s)\n",
			memory.FormatBytes(cfg.Fit), optFlag, c.Config.Memory.Accum, c.Config.Memory.Checkpoint, c.Config.Precision.AMP, memory.FormatBytes(c.Peak.Total))
		if cfg.Plan {
			// -fit SIZE -plan: the chosen flags and their plan, no training.
			train.WritePlan(stdout, c.Config, c.Peak)
			return 0
		}
		cfg = c.Config
	}
	if cfg.Plan {
		p, err := train.Plan(cfg)
		if err != nil {
			return fail(2, err)
		}
		train.WritePlan(stdout, cfg, p)
		return 0
	}
	dev, err := train.NewDeviceOrdinal(cfg, localRank())
	if err != nil {
		return fail(2, err)
	}
	if err := train.Preflight(cfg, dev.Memory().Capacity()); err != nil {
		return fail(2, err)
	}
	if comm != nil && cfg.Device.Name == "cuda" {
		// GPU ranks talk through NCCL; MPI only introduced them.
		nc, err := parallel.NewNCCL(comm, dev)
		if err != nil {
			return fail(2, fmt.Errorf("-dist mpi -device cuda: %v", err))
		}
		defer nc.Close()
		comm = nc
	}
	if cfg.Output.MemReport != "" {
		dev.Memory().EnableHistory(1 << 20)
		tensor.EnableAllocSites(dev.Memory())
	}
	t, err := train.NewDistributed(cfg, dev, comm, stderr)
	if err != nil {
		return fail(2, err)
	}
	defer t.Close()
	if cfg.Generate.Tokens > 0 {
		text, err := t.GenerateText()
		if err != nil {
			return fail(2, err)
		}
		if cfg.Output.Resume == "" {
			fmt.Fprintln(stderr, "train: warning: -generate without -resume sampled from untrained weights")
		}
		fmt.Fprintln(stdout, text)
		return 0
	}
	switch {
	case t.Step() >= t.Total() && cfg.Output.Resume != "" && cfg.Output.SaveFormat == "hf" && cfg.Output.Save != "":
		// Nothing to train, something to export: the resumed model in
		// Hugging Face's layout (adapters merged).
		if err := t.Save(cfg.Output.Save); err != nil {
			return fail(1, err)
		}
		fmt.Fprintf(stderr, "train: exported %s at step %d to %s (Hugging Face layout)\n", cfg.Output.Resume, t.Step(), cfg.Output.Save)
		return 0
	case t.Step() >= t.Total() && cfg.Output.Resume != "":
		return fail(2, fmt.Errorf("-resume %s is at step %d and the run ends at step %d: nothing to train (raise -steps)", cfg.Output.Resume, t.Step(), t.Total()))
	case t.Step() >= t.Total():
		return fail(2, fmt.Errorf("-epochs %d of -batch %d: no full batch in the data, nothing to train", cfg.Optim.Epochs, cfg.Optim.Batch))
	}
	if !cfg.Output.Quiet && (comm == nil || comm.Rank() == 0) {
		where := dev.Name()
		if comm != nil {
			where = fmt.Sprintf("%d ranks of %s", comm.Size(), dev.Name())
		}
		fmt.Fprintf(stderr, "%s: %d parameters on %s\n", cfg.Model.Name, count(t), where)
	}
	sum, err := t.Run(ctx)
	code := 0
	switch {
	case errors.Is(err, train.ErrInterrupted):
		fmt.Fprintf(stderr, "train: %v\n", err)
		code = 130
	case err != nil:
		return fail(1, err)
	}
	// Run saved the final state before returning; an output that fails
	// now says so, since that state is what the user has left.
	saved := func(err error) error {
		if cfg.Output.Save == "" || code != 0 {
			return err
		}
		return fmt.Errorf("%v (the trained state was saved to %s)", err, cfg.Output.Save)
	}
	if cfg.Output.Summary != "" {
		if err := writeJSON(cfg.Output.Summary, sum); err != nil {
			return fail(1, saved(fmt.Errorf("-summary %v", err)))
		}
	}
	if cfg.Output.MemReport != "" {
		if err := train.WriteMemoryReport(cfg.Output.MemReport, dev.Memory()); err != nil {
			return fail(1, saved(fmt.Errorf("-mem-report %v", err)))
		}
		if path, host := cfg.HostMemReport(), t.Host(); path != "" && host != nil {
			if err := train.WriteMemoryReport(path, host.Memory()); err != nil {
				return fail(1, saved(fmt.Errorf("-mem-report (host memory) %v", err)))
			}
		}
	}
	if code == 0 {
		line := fmt.Sprintf("steps %d, final loss %.4f, eval loss %.4f", sum.Steps, sum.FinalLoss, sum.Eval.Loss)
		if sum.Eval.Examples == 0 {
			line = fmt.Sprintf("steps %d, final loss %.4f, no evaluation (no held-out data)", sum.Steps, sum.FinalLoss)
		}
		if sum.Eval.Accuracy != nil {
			line += fmt.Sprintf(", eval accuracy %.2f%%", 100**sum.Eval.Accuracy)
		}
		fmt.Fprintf(stdout, "%s, %.0f samples/s, peak %s\n", line, sum.SamplesPerSec, memory.FormatBytes(sum.PeakBytes.Total))
		if cfg.Data.Path == "" && cfg.Model.Name == "mlp" && sum.Eval.Accuracy != nil && !cfg.Output.Quiet {
			fmt.Fprintln(stdout, defaultTaskNote)
		}
	}
	return code
}

// defaultTaskNote says what the accuracy of a run on the embedded task
// means. Measured with the default flags (-epochs 1, 5 and 20).
const defaultTaskNote = "(the embedded task is 10 synthetic spiral arms: chance is 10%; the default MLP reaches about 62% in its one epoch, 87% with -epochs 5 and 91% with -epochs 20; real data: -data /usr/share/datasets/fashion-mnist)"

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
