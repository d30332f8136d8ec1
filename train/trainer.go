package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/memfit/memfit/accumulate"
	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/internal/plantrace"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// Model is what the trainer trains: a module whose repeated blocks run
// through a replaceable runner (how checkpoint policies apply).
type Model interface {
	nn.Module
	SetBlockRunner(nn.BlockRunner)
}

// Batches delivers training batches in order; the data loader is one, the
// planner's shape-only batches another.
type Batches interface {
	Next(ctx context.Context) (*data.Batch, error)
	Position() data.Position
	Seek(data.Position) error
	PerEpoch() int
}

// Hooks let custom code run inside the loop. A hook's error stops training.
type Hooks struct {
	AfterStep func(t *Trainer, r Record) error
	AfterEval func(t *Trainer, e EvalStats) error
}

// Trainer runs the training loop of a Config. The library API for custom
// loops stays usable on its own; the Trainer only combines it.
type Trainer struct {
	Config Config
	Device device.Device
	Model  Model
	Opt    *optim.Optimizer
	Scaler *amp.GradScaler // nil unless -amp fp16
	Hooks  Hooks
	Log    io.Writer // one line per notable event (OOM recovery, saves); nil: discard

	task     task
	inShape  []int // one example's input shape as the model takes it
	train    Batches
	val      data.Dataset
	schedule optim.Schedule
	autocast device.DType
	frozen   []*tensor.Tensor // parameters -freeze or -lora froze (-freeze's train again at UnfreezeAt)
	runID    string           // made when a run starts fresh, kept by Resume (state.go)
	codec    Codec            // token tasks: text to tokens and back (generate.go)

	// parts are the techniques' parts of this run (technique.build), in
	// technique order; upd is the one that owns the update, or
	// plainUpdate.
	parts []any
	upd   updater

	// ctx stops what the Trainer does outside Run (generation); Run has
	// its own.
	ctx context.Context

	// Data parallelism (ranks.go): nil comm is one process.
	comm        parallel.Comm
	rank, ranks int

	step      int // optimizer steps done
	accum     int // micro-batches per step now (grows on OOM)
	oomCount  int
	nonFinite int // steps skipped for a NaN/inf loss
	total     int // steps to run
	lastLoss  float64
	lastEval  EvalStats
	runPeaks  PeakBytes
	// stepModelState is the last step's peak of the model states
	// (PeakBytes.ModelState), from a watermark around tryStep.
	stepModelState int64
	samples        int64
	tokens         int64   // trained tokens, every rank's (token tasks)
	padding        float64 // the steps' padding fractions, summed
	stepsRun       int     // steps run by this process (not resumed)
	trainTime      time.Duration
	data           io.Closer // the dataset's files (fine-tuning records), closed with the trainer
	badData        error     // why the data cannot train the model (CheckData), nil if it can
}

// task says how a batch becomes a loss: classification (one label per
// example) or language modelling (one target per token).
type task struct {
	tokens  bool // inputs are token ids, targets per position
	classes int
	ignore  int // the target that trains nothing (token tasks)
}

func (t *Trainer) logf(format string, args ...any) {
	if t.Log != nil {
		fmt.Fprintf(t.Log, format+"\n", args...)
	}
}

// Step is the number of optimizer steps done.
func (t *Trainer) Step() int { return t.step }

// Total is the step the run ends at (-steps, or -epochs' worth of steps).
func (t *Trainer) Total() int { return t.total }

// Accum is the number of micro-batches each step is now cut into.
func (t *Trainer) Accum() int { return t.accum }

// ErrNonFinite reports a NaN or infinite loss.
var ErrNonFinite = errors.New("non-finite loss")

// loss is the mean cross-entropy of the model on a (micro-)batch, over
// its targets that are not the task's ignore index; positions, when not
// nil, are a packed batch's (each token's place in its example, 0
// starting one: models.Packed keeps attention inside examples).
func (t *Trainer) loss(r *nn.Run, inputs, targets *tensor.Tensor, positions []int32) *tensor.Tensor {
	ce := tensor.CrossEntropyOptions{Ignore: tensor.IgnoreIndex(t.task.ignore)}
	if positions != nil {
		p, ok := t.Model.(models.Packed)
		if !ok {
			panic(&tensor.Error{Op: "loss", Msg: fmt.Sprintf("the model (%T) cannot keep attention inside packed examples (models.Packed)", t.Model)})
		}
		if _, chunked := t.chunkedLoss(); chunked {
			return p.TokenLossPacked(r, inputs, targets, positions, ce)
		}
		logits := p.ForwardPacked(r, inputs, positions)
		defer logits.Release()
		return t.tokenCrossEntropy(r, logits, targets, ce)
	}
	if m, ok := t.chunkedLoss(); ok {
		return m.TokenLoss(r, inputs, targets, ce)
	}
	logits := t.Model.Forward(r, inputs)
	defer logits.Release()
	if t.task.tokens {
		return t.tokenCrossEntropy(r, logits, targets, ce)
	}
	return r.CrossEntropy(logits, targets, tensor.CrossEntropyOptions{})
}

// tokenCrossEntropy is the mean cross-entropy of [.., vocab] logits
// against their targets, one row per token.
func (t *Trainer) tokenCrossEntropy(r *nn.Run, logits, targets *tensor.Tensor, ce tensor.CrossEntropyOptions) *tensor.Tensor {
	v := logits.Shape()[logits.Dim()-1]
	flat := r.Reshape(logits, -1, v)
	defer flat.Release()
	tflat := r.Reshape(targets, -1)
	defer tflat.Release()
	return r.CrossEntropy(flat, tflat, ce)
}

// rowsOf returns the host values of a batch's rows [lo, hi) (nil for
// none): a micro-batch's share of its packed positions.
func rowsOf(all []int32, rows, lo, hi int) []int32 {
	if all == nil {
		return nil
	}
	per := len(all) / max(rows, 1)
	return all[lo*per : hi*per]
}

// stepSeed keys the dropout masks of micro-batch i of step n, so a resumed
// run draws exactly the masks of an uninterrupted one.
func stepSeed(seed uint64, step, micro int) uint64 {
	x := seed ^ uint64(step)*0x9e3779b97f4a7c15 ^ uint64(micro)*0xc2b2ae3d27d4eb4f
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	return x ^ x>>33
}

// stepResult is what one optimizer step reports.
type stepResult struct {
	loss     float64
	gradNorm float64
	stepped  bool
}

// trainStep runs one optimizer step on a batch, recovering from running
// out of memory by cutting the batch into more micro-batches, unless a
// technique says the step cannot be retried (retryVeto).
func (t *Trainer) trainStep(b *data.Batch) (stepResult, error) {
	for {
		res, err := t.tryStep(b)
		if err == nil || !tensor.IsOOM(err) {
			return res, err
		}
		if verr := each(t, func(h retryVeto) error { return h.vetoRetry(t, err) }); verr != nil {
			t.upd.zeroGrad(t)
			t.noteTried(err, false)
			return res, verr
		}
		t.upd.zeroGrad(t)
		t.Device.Memory().EmptyCache()
		rows := b.Len()
		if t.accum >= rows {
			t.noteTried(err, true)
			return res, fmt.Errorf("step %d: out of memory with micro-batches of 1 example: %w", t.step+1, err)
		}
		next := min(t.accum*2, rows)
		t.logf("step %d: out of memory with %d micro-batch(es) of %d examples; retrying with %d of %d (-accum %d)",
			t.step+1, t.accum, (rows+t.accum-1)/t.accum, next, (rows+next-1)/next, next)
		t.accum = next
		t.oomCount++
	}
}

// noteTried records in an out-of-memory error the options this run already
// has on, so that its hint suggests only what has not been tried; single
// is set when micro-batches were already one example each (a smaller
// -batch cannot help then).
func (t *Trainer) noteTried(err error, single bool) {
	var oom *memory.OOMError
	if !errors.As(err, &oom) {
		return
	}
	tried := oom.Tried[:0:0]
	if t.accum > 1 {
		tried = append(tried, "-accum")
	}
	if single {
		tried = append(tried, "-batch")
	}
	c := t.Config
	for _, tech := range techniques {
		if tech.tried != nil {
			for _, n := range tech.tried(&c) {
				if !slices.Contains(tried, n) {
					tried = append(tried, n)
				}
			}
		}
	}
	oom.Tried = tried
}

// shaped sets a batch's input shape to what the model takes (a flat
// vector dataset feeding a CNN).
func (t *Trainer) shaped(b *data.Batch) *data.Batch {
	if t.inShape != nil && len(b.InputShape) != len(t.inShape)+1 {
		b.InputShape = append([]int{b.Len()}, t.inShape...)
	}
	return b
}

// scopeOptions are the step's (training) or an evaluation's scope
// options: the techniques' (autocast, saved-tensor hooks), in order.
func (t *Trainer) scopeOptions(training bool) []tensor.ScopeOption {
	var opts []tensor.ScopeOption
	each(t, func(h scoper) error { opts = append(opts, h.scopeOptions(t, training)...); return nil })
	return opts
}

// beforeForward runs the techniques' hooks before a forward (ZeRO-3's
// gather of the parameters outside the blocks).
func (t *Trainer) beforeForward() {
	each(t, func(h forwardHook) error { h.beforeForward(t); return nil })
}

// tryStep runs one optimizer step: the micro-batches' forwards and
// backwards (accumulate.Window), with the techniques' hooks around each,
// then the update through the run's updater: reduce the gradients,
// unscale them (fp16), clip them, step.
func (t *Trainer) tryStep(b *data.Batch) (stepResult, error) {
	w := t.Device.Memory().NewWatermark()
	defer func() {
		t.stepModelState = w.PeakOfModelState()
		w.Close()
	}()
	var res stepResult
	in, tg, err := t.shaped(b).ToDevice(t.Device)
	if err != nil {
		return res, err
	}
	defer in.Release()
	defer tg.Release()
	accum := min(t.accum, b.Len())
	var micro []accumulate.Micro
	if t.task.tokens {
		micro, err = accumulate.SplitTokens(in, tg, accum, t.task.ignore)
	} else {
		micro, err = accumulate.Split(in, tg, accum)
	}
	if err != nil {
		return res, err
	}
	defer func(all []accumulate.Micro) {
		for _, m := range all {
			m.Release()
		}
	}(micro)
	if len(micro) > 3 && !device.StoresValues(t.Device) && !plantrace.Every() {
		micro = tracedMicro(micro)
	}
	var scale func(s *tensor.Scope, l *tensor.Tensor) *tensor.Tensor
	if t.Scaler != nil {
		scale = t.Scaler.Scale
	}
	i := 0
	var hookErr error // the first hook's error; the step fails with it after backward
	res.loss, err = accumulate.Window(micro, func(s *tensor.Scope, m accumulate.Micro) *tensor.Tensor {
		mb := microBatch{Micro: m, index: i, last: i == len(micro)-1}
		if hookErr == nil {
			hookErr = each(t, func(h microHook) error { return h.beforeMicroBatch(t, mb) })
		}
		t.beforeForward()
		// Each rank draws its own dropout masks (rank 0 those of a
		// one-process run): the same masks on every rank's different
		// examples would correlate the replicas' noise.
		r := nn.NewRun(s, stepSeed(t.Config.Seed^uint64(t.rank)*0x94d049bb133111eb, t.step, i))
		i++
		l := t.loss(r, m.Inputs, m.Targets, rowsOf(b.Positions, b.Len(), m.Lo, m.Hi))
		if err := each(t, func(h lossHook) error { return h.afterLoss(t, mb, l) }); err != nil && hookErr == nil {
			hookErr = err
		}
		return l
	}, scale, t.scopeOptions(true)...)
	if err == nil {
		err = hookErr
	}
	if err != nil {
		t.upd.zeroGrad(t)
		each(t, func(h abortHook) error { err = h.abortStep(t, err); return nil })
		return res, err
	}
	if t.distributed() {
		// The mean over the ranks: what is logged, and what the
		// non-finite check below sees the same on every rank.
		l, err := t.allReduce(float32(res.loss), parallel.Avg)
		if err != nil {
			t.upd.zeroGrad(t)
			return res, err
		}
		res.loss = float64(l)
	}
	done := false
	err = each(t, func(h backwardStepper) error {
		d, err := h.afterBackward(t, res.loss)
		done = done || d
		return err
	})
	if done || err != nil {
		res.stepped = done
		return res, err
	}
	if math.IsNaN(res.loss) || math.IsInf(res.loss, 0) {
		t.upd.zeroGrad(t)
		if t.Config.Optim.SkipNonFinite {
			t.nonFinite++
			t.logf("step %d: loss is %v; step skipped", t.step+1, res.loss)
			return res, nil
		}
		return res, fmt.Errorf("step %d: loss is %v: %w", t.step+1, res.loss, ErrNonFinite)
	}
	err = tensor.Catch(func() error { return t.update(&res) })
	t.upd.zeroGrad(t)
	if err != nil {
		each(t, func(h abortHook) error { err = h.abortStep(t, err); return nil })
	}
	return res, err
}

// update turns the step's gradients into the parameters' update through
// the run's updater.
func (t *Trainer) update(res *stepResult) error {
	u := t.upd
	if err := u.reduce(t); err != nil {
		return err
	}
	target := u.target(t)
	if t.Scaler != nil {
		if err := t.Scaler.Unscale(target); err != nil {
			return err
		}
	}
	if t.Config.Optim.Clip > 0 {
		n, err := u.clipGradNorm(t, t.Config.Optim.Clip)
		if err != nil {
			return err
		}
		res.gradNorm = n
	} else if t.Config.Output.Metrics != "" {
		n, err := u.gradNorm(t)
		if err != nil {
			return err
		}
		res.gradNorm = n
	}
	if t.Scaler != nil {
		ok, err := t.Scaler.Step(target)
		t.Scaler.Update()
		res.stepped = ok
		return err
	}
	res.stepped = true
	return target.Step()
}

// Evaluate runs the validation set in inference mode (no graph) and
// returns the mean loss and, for classification, the accuracy.
func (t *Trainer) Evaluate(ctx context.Context) (EvalStats, error) {
	var st EvalStats
	if t.val == nil || t.val.Len() == 0 {
		return st, nil
	}
	// Batches of a training micro-batch's size: evaluation then fits
	// wherever a step does, also after out-of-memory recovery raised
	// -accum (the mean over examples does not depend on the batching).
	batch := max(1, t.Config.Optim.Batch/max(t.accum, 1))
	loader, err := data.NewLoader(t.val, data.LoaderConfig{Batch: batch, Workers: t.Config.Data.Workers, Prefetch: t.Config.Data.Prefetch, PrefetchBytes: PrefetchBytes})
	if err != nil {
		return st, err
	}
	var lossSum float64
	var n, wsum, correct int
	opts := append([]tensor.ScopeOption{tensor.NoGrad()}, t.scopeOptions(false)...)
	defer each(t, func(h evalHook) error { h.afterEvaluate(t); return nil })
	for b, err := range loader.All(ctx) {
		if err != nil {
			return st, err
		}
		err = tensor.Step(func(s *tensor.Scope) error {
			in, tg, err := t.shaped(b).ToDevice(t.Device)
			if err != nil {
				return err
			}
			defer in.Release()
			defer tg.Release()
			t.beforeForward()
			r := nn.Eval(s)
			var l *tensor.Tensor
			weight := b.Len()
			if t.task.tokens {
				// The training loss's path: with the chunked head, no
				// [tokens, vocab] logits exist in evaluation either. A
				// token loss is a mean over trained tokens: weighted by
				// them, the mean is over the split's trained tokens.
				l = t.loss(r, in, tg, b.Positions)
				weight = trainedTokens(b.Targets, t.task.ignore)
				st.Tokens += weight
			} else {
				logits := t.Model.Forward(r, in)
				defer logits.Release()
				l = s.CrossEntropy(logits, tg, tensor.CrossEntropyOptions{})
				correct += countCorrect(logits.Float32s(), b.Targets, t.task.classes)
			}
			if weight > 0 {
				lossSum += l.Item() * float64(weight)
			}
			wsum += weight
			n += b.Len()
			return nil
		}, opts...)
		b.Recycle()
		if err != nil {
			return st, err
		}
	}
	st.Loss = lossSum / float64(max(wsum, 1))
	st.Examples = n
	if t.task.tokens && wsum > 0 {
		ppl := math.Exp(st.Loss)
		st.Perplexity = &ppl
	}
	if !t.task.tokens {
		acc := float64(correct) / float64(max(n, 1))
		st.Accuracy = &acc
	}
	return st, nil
}

func countCorrect(logits []float32, targets []int32, classes int) int {
	c := 0
	for i, y := range targets {
		row := logits[i*classes : (i+1)*classes]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if best == int(y) {
			c++
		}
	}
	return c
}

// trainedTokens counts the targets that are not ignore.
func trainedTokens(targets []int32, ignore int) int {
	n := 0
	for _, v := range targets {
		if int(v) != ignore {
			n++
		}
	}
	return n
}

// CheckData reports why the run's data cannot train its model, before a
// step fails on it: the embedded synthetic task's token ids past an
// imported model's vocabulary. Run returns the same error first; a
// command reports it as bad input.
func (t *Trainer) CheckData() error { return t.badData }

// tracedMicro are the micro-batches a plan traces: the first two of each
// size and the last. Those it skips allocate as the second of their size
// does (the first makes the gradients the others add into; the last is
// the one techniques act on after), so the peaks are the whole step's,
// the caching allocator's reserve included (TestPlanSkipsRepeatsExactly),
// in a time that does not grow with the micro-batches.
func tracedMicro(micro []accumulate.Micro) []accumulate.Micro {
	seen := map[int]int{}
	var out []accumulate.Micro
	for i, m := range micro {
		n := m.Hi - m.Lo
		if seen[n] < 2 || i == len(micro)-1 {
			out = append(out, m)
		}
		seen[n]++
	}
	return out
}
