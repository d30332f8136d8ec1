package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/memfit/memfit/internal/procmem"
	"github.com/memfit/memfit/memory"
)

// ErrInterrupted is returned by Run when its context was cancelled (for
// example by SIGINT): the run stopped at a step boundary and, when a save
// path is set, saved its state first.
var ErrInterrupted = errors.New("training interrupted")

// Run trains for the configured number of steps. When ctx is cancelled it
// stops at the next step boundary, saves (if Config.Save is set) and
// returns ErrInterrupted wrapped with where the state went.
func (t *Trainer) Run(ctx context.Context) (Summary, error) {
	if err := t.CheckData(); err != nil {
		return Summary{}, err
	}
	cfg := t.Config
	mem := t.Device.Memory()
	lead := t.rank == 0 // prints, writes metrics and saves
	metricsPath := cfg.Output.Metrics
	if !lead {
		metricsPath = ""
	}
	metrics, err := openMetrics(metricsPath)
	if err != nil {
		return Summary{}, err
	}
	defer metrics.close()
	// The bar redraws one line with \r: on standard error, and only when
	// that is a terminal (in a log file it would be hundreds of lines).
	var bar *progressbar.ProgressBar
	if !cfg.Output.Quiet && lead && term.IsTerminal(int(os.Stderr.Fd())) {
		bar = progressbar.NewOptions(t.total,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("training"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(24),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish())
		bar.Set(t.step)
	}
	// A cancellation stops a step midway where that leaves the state
	// whole (interrupt.go); evaluations never change it.
	stopper := newStopper(ctx, mem)
	defer stopper.close()
	mid := t.midStep()
	for t.step < t.total {
		// Every rank stops at the same step (a signal reaches the ranks
		// at different times), so that the save's collectives match.
		stop, err := t.agree(ctx.Err() != nil)
		if err != nil {
			return Summary{}, err
		}
		if stop {
			return t.interrupted()
		}
		if err := each(t, func(h stepHook) error { return h.beforeStep(t) }); err != nil {
			return Summary{}, err
		}
		nextCtx := ctx
		if t.distributed() {
			nextCtx = context.WithoutCancel(ctx) // stopping is agreed on above
		}
		pos := t.train.Position()
		b, err := t.train.Next(nextCtx)
		if err != nil {
			if ctx.Err() != nil && !t.distributed() {
				return t.interrupted()
			}
			return Summary{}, err
		}
		mem.ResetPeak()
		mem.SetStep(int64(t.step + 1))
		start := time.Now()
		if mid {
			stopper.arm()
		}
		res, err := t.trainStep(b)
		stopper.disarm()
		if interruptedBy(ctx, err) {
			// Abandoned whole: the next run takes this batch again.
			b.Recycle()
			if err := t.train.Seek(pos); err != nil {
				return Summary{}, err
			}
			return t.interrupted()
		}
		if err != nil {
			return Summary{}, err
		}
		elapsed := time.Since(start)
		n, epoch := b.Len(), b.Epoch
		tokens, pad := 0, b.PaddingFraction()
		if t.task.tokens {
			tokens = trainedTokens(b.Targets, t.task.ignore)
			t.tokens += int64(tokens * max(t.ranks, 1))
		}
		t.padding += pad
		t.stepsRun++
		b.Recycle() // its arrays serve a later batch: no new host arrays per step
		t.trainTime += elapsed
		t.samples += int64(n * max(t.ranks, 1))
		t.step++
		t.lastLoss = res.loss
		st := mem.Stats()
		t.notePeaks(st)
		rec := Record{
			Step: t.step, Epoch: epoch, Loss: res.loss, LR: t.Opt.LR(0), GradNorm: res.gradNorm,
			SamplesPerS: float64(n*max(t.ranks, 1)) / elapsed.Seconds(), TrainedTokens: tokens, PaddingFraction: pad, Accum: t.accum,
			Allocated: st.Allocated.Current, Reserved: st.Reserved.Current, Peak: st.Requested.Peak,
			PeakByCategory: map[string]int64{},
		}
		for c := memory.Category(0); c < memory.NumCategories; c++ {
			rec.PeakByCategory[c.String()] = st.Category(c).Peak
		}
		if t.Scaler != nil {
			rec.LossScale, rec.Skipped = t.Scaler.LossScale(), t.Scaler.Skipped()
		}
		if cfg.Output.EvalEvery > 0 && t.step%cfg.Output.EvalEvery == 0 && t.step < t.total {
			stopper.arm()
			e, err := t.Evaluate(ctx)
			stopper.disarm()
			if interruptedBy(ctx, err) {
				return t.interrupted()
			}
			if err != nil {
				t.noteTried(err, false)
				return Summary{}, err
			}
			t.lastEval = e
			if e.Examples > 0 {
				rec.EvalLoss, rec.EvalAccuracy = &e.Loss, e.Accuracy
			}
			if !cfg.Output.Quiet && lead && e.Examples > 0 {
				if bar != nil {
					bar.Clear()
				}
				line := fmt.Sprintf("step %d: eval loss %.4f", t.step, e.Loss)
				if e.Accuracy != nil {
					line += fmt.Sprintf(", accuracy %.2f%%", 100**e.Accuracy)
				}
				t.logf("%s", line)
				if s := t.evalSample(); s != "" {
					t.logf("step %d: sample %q", t.step, s)
				}
			}
			if t.Hooks.AfterEval != nil {
				if err := t.Hooks.AfterEval(t, e); err != nil {
					return Summary{}, err
				}
			}
		}
		if err := metrics.write(rec); err != nil {
			return Summary{}, t.SaveAfter(fmt.Errorf("-metrics %s: %v", cfg.Output.Metrics, err))
		}
		if t.Hooks.AfterStep != nil {
			if err := t.Hooks.AfterStep(t, rec); err != nil {
				return Summary{}, err
			}
		}
		if bar != nil {
			bar.Describe(fmt.Sprintf("loss %.4f | %.0f samples/s | %s, step peak %s", res.loss, float64(t.samples)/t.trainTime.Seconds(),
				memory.FormatBytes(st.Requested.Current), memory.FormatBytes(st.Requested.Peak)))
			bar.Set(t.step)
		}
		if cfg.Output.Save != "" && cfg.Output.SaveEvery > 0 && t.step%cfg.Output.SaveEvery == 0 && t.step < t.total {
			if err := t.Save(cfg.Output.Save); err != nil {
				return Summary{}, err
			}
		}
	}
	if bar != nil {
		bar.Finish()
	}
	stopper.arm()
	e, err := t.Evaluate(ctx)
	stopper.disarm()
	if interruptedBy(ctx, err) {
		return t.interrupted()
	}
	if err != nil {
		t.noteTried(err, false)
		return Summary{}, err
	}
	t.lastEval = e
	if cfg.Output.Save != "" {
		if err := t.Save(cfg.Output.Save); err != nil {
			return Summary{}, err
		}
	}
	return t.summary(), nil
}

func (t *Trainer) notePeaks(st memory.Stats) {
	p := peakBytes(st)
	r := &t.runPeaks
	r.Total = max(r.Total, p.Total)
	r.Reserved = max(r.Reserved, p.Reserved)
	r.Parameter = max(r.Parameter, p.Parameter)
	r.Gradient = max(r.Gradient, p.Gradient)
	r.OptimizerState = max(r.OptimizerState, p.OptimizerState)
	r.Activation = max(r.Activation, p.Activation)
	r.Temporary = max(r.Temporary, p.Temporary)
	r.Data = max(r.Data, p.Data)
	r.KVCache = max(r.KVCache, p.KVCache)
	each(t, func(h reporter) error { h.notePeaks(r); return nil })
	r.ModelState = max(r.ModelState, t.stepModelState)
}

// Peaks are the per-category peaks over the steps run so far.
func (t *Trainer) Peaks() PeakBytes { return t.runPeaks }

func (t *Trainer) summary() Summary {
	s := Summary{
		Steps: t.step, FinalLoss: t.lastLoss, Eval: t.lastEval,
		PeakBytes: t.runPeaks, Config: t.Config, OOMRetries: t.oomCount, TrainedTokens: t.tokens,
	}
	if t.stepsRun > 0 {
		s.PaddingFraction = t.padding / float64(t.stepsRun)
	}
	if t.trainTime > 0 && t.tokens > 0 {
		s.TokensPerSec = float64(t.tokens) / t.trainTime.Seconds()
	}
	if rss, ok := procmem.PeakRSS(); ok {
		s.PeakRSSBytes = rss
	}
	if t.trainTime > 0 {
		s.SamplesPerSec = float64(t.samples) / t.trainTime.Seconds()
	}
	s.SkippedSteps = t.nonFinite
	if t.Scaler != nil {
		s.SkippedSteps += t.Scaler.Skipped()
	}
	if t.Config.Output.Save != "" {
		s.Checkpoint = t.Config.Output.Save
	}
	each(t, func(h reporter) error { h.summarize(&s); return nil })
	return s
}

// interrupted saves (when a path is set) and reports where.
func (t *Trainer) interrupted() (Summary, error) {
	s := t.summary()
	if t.Config.Output.Save == "" {
		return s, fmt.Errorf("%w at step %d (no -save path: state not saved)", ErrInterrupted, t.step)
	}
	if err := t.Save(t.Config.Output.Save); err != nil {
		return s, fmt.Errorf("%w at step %d; saving failed: %v", ErrInterrupted, t.step, err)
	}
	return s, fmt.Errorf("%w at step %d; state saved to %s (continue with -resume %s)", ErrInterrupted, t.step, t.Config.Output.Save, t.Config.Output.Save)
}

// SaveAfter saves the current state when -save is set, for an output that
// failed mid-run or after it (a full disk under -metrics must not cost the
// weights), and says in the returned error where the state went.
func (t *Trainer) SaveAfter(err error) error {
	if t.Config.Output.Save == "" {
		return fmt.Errorf("%v (no -save path: state not saved)", err)
	}
	if serr := t.Save(t.Config.Output.Save); serr != nil {
		return fmt.Errorf("%v; saving the state failed too: %v", err, serr)
	}
	return fmt.Errorf("%v; state at step %d saved to %s (continue with -resume %s)", err, t.step, t.Config.Output.Save, t.Config.Output.Save)
}
