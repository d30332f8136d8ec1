package train

import (
	"github.com/memfit/memfit/accumulate"
	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// The hooks a technique's part of a run may implement (technique.build
// returns the part). The trainer finds them by type assertion, as
// database/sql finds a driver's optional interfaces, and calls every
// part that has one in technique order, at the point each comment names.

// Building a run (assemble), in this order:
type (
	// modelShaper chooses how the model is built: before it is built
	// or imported.
	modelShaper interface {
		shapeModel(t *Trainer, b *modelBuild)
	}
	// modelAdapter changes the built model (adapters): before the
	// optimizer exists.
	modelAdapter interface{ adaptModel(t *Trainer) error }
	// optimizerBuilder builds t.Opt itself (over host copies, say) and
	// reports whether it did; the trainer builds it otherwise.
	optimizerBuilder interface {
		buildOptimizer(t *Trainer) (bool, error)
	}
	// optimizerTuner sets an optimizer up, each one the run builds
	// (ZeRO builds one per shard).
	optimizerTuner interface {
		tuneOptimizer(t *Trainer, o *optim.Optimizer)
	}
	// modelFreezer freezes parameters (t.frozen): once the optimizer
	// exists.
	modelFreezer interface{ freezeModel(t *Trainer) error }
	// sharder spreads the model state over ranks: once frozen
	// parameters are known.
	sharder interface{ shard(t *Trainer) error }
	// precisionSetter sets the step's dtypes (t.autocast, t.Scaler):
	// once the run is sharded.
	precisionSetter interface{ setPrecision(t *Trainer) error }
	// runnerWrapper wraps the model's block runner (nil: blocks run in
	// sequence); each part wraps what the one before it returned.
	runnerWrapper interface {
		wrapRunner(t *Trainer, r nn.BlockRunner) nn.BlockRunner
	}
	// armer installs what runs inside backward: last, before resuming.
	armer interface{ arm(t *Trainer) }
	// resumedHook brings a part up to date with the weights Resume
	// loaded.
	resumedHook interface{ resumed(t *Trainer) error }
)

// Running a step (tryStep) and the loop (Run, Evaluate):
type (
	// stepHook runs before each optimizer step of the loop.
	stepHook interface{ beforeStep(t *Trainer) error }
	// scoper adds scope options to training steps (training) and
	// evaluations.
	scoper interface {
		scopeOptions(t *Trainer, training bool) []tensor.ScopeOption
	}
	// microHook runs before each micro-batch's forward.
	microHook interface {
		beforeMicroBatch(t *Trainer, mb microBatch) error
	}
	// forwardHook runs before every forward, training and evaluation
	// alike; a failure leaves as a panic that tensor.Step returns.
	forwardHook interface{ beforeForward(t *Trainer) }
	// lossHook sees each micro-batch's loss before its backward.
	lossHook interface {
		afterLoss(t *Trainer, mb microBatch, loss *tensor.Tensor) error
	}
	// backwardStepper updated the parameters during backward: done
	// says the step needs no update after it.
	backwardStepper interface {
		afterBackward(t *Trainer, loss float64) (done bool, err error)
	}
	// abortHook cleans up after a failed step and may add to its error.
	abortHook interface {
		abortStep(t *Trainer, err error) error
	}
	// retryVeto says why an out-of-memory step cannot be retried in more
	// micro-batches (nil: it can).
	retryVeto interface {
		vetoRetry(t *Trainer, err error) error
	}
	// evalHook runs after an evaluation.
	evalHook interface{ afterEvaluate(t *Trainer) }
)

// The optimizer path, saving and reporting:
type (
	// updater turns a step's gradients into the update: a part that owns
	// where the update happens (data parallelism, the optimizer
	// offloaded). At most one part of a run is one (the techniques'
	// rules see to it); without one the optimizer steps itself
	// (plainUpdate).
	updater interface {
		// reduce completes the gradients (averaged over the ranks).
		reduce(t *Trainer) error
		// target is what the loss scaler unscales and what steps.
		target(t *Trainer) amp.Optimizer
		clipGradNorm(t *Trainer, max float64) (float64, error)
		gradNorm(t *Trainer) (float64, error)
		zeroGrad(t *Trainer)
		// exportState and importState carry the full optimizer state
		// (collectives when sharded).
		exportState(t *Trainer) (optim.State, error)
		importState(t *Trainer, st optim.State) error
	}
	// weightHolder holds the parameters in shards (ZeRO-3): saves and
	// resumes gather or scatter them through it.
	weightHolder interface {
		gatherAll(f func() error) error
		gatherEach(f func(params []*tensor.Tensor) error) error
		loadFull(value func(p *tensor.Tensor) []float32) error
	}
	// checkpointer says what a checkpoint of the run holds and checks a
	// checkpoint against the run before anything is loaded.
	checkpointer interface {
		savedParams(t *Trainer) []*tensor.Tensor
		saveState(t *Trainer, st *trainerState, meta map[string]string)
		checkResume(t *Trainer, st trainerState) error
	}
	// loadHook runs around loading a checkpoint's weights.
	loadHook interface {
		beforeLoad(t *Trainer, st trainerState) error
		afterLoad(t *Trainer, st trainerState) error
	}
	// reporter adds to the run's summary and peaks.
	reporter interface {
		summarize(s *Summary)
		notePeaks(p *PeakBytes)
	}
	// sampler says whether the evaluation may write a text sample.
	sampler interface{ sampleable() bool }
	// closer releases what a part holds, when the trainer closes.
	closer interface{ close(t *Trainer) }
)

// microBatch is one micro-batch of a step, as hooks see it.
type microBatch struct {
	accumulate.Micro
	index int  // its place in the step, from 0
	last  bool // the step's last: its backward completes the gradients
}

// modelBuild is how the model is built: its parameters' dtype (Invalid:
// F32) and whether they are deferred (drawn when sharded).
type modelBuild struct {
	dtype  tensor.DType
	defer_ bool
	// park, when set, moves a frozen, quantized weight of a block to
	// host memory as soon as it is made (-offload base), so that the
	// base never exists whole on the device.
	park func(*tensor.Tensor) error
}

// each calls f with every part implementing H, in technique order, and
// stops at the first error.
func each[H any](t *Trainer, f func(H) error) error {
	for _, p := range t.parts {
		if h, ok := p.(H); ok {
			if err := f(h); err != nil {
				return err
			}
		}
	}
	return nil
}

// partAs returns the first part implementing H.
func partAs[H any](t *Trainer) (H, bool) {
	for _, p := range t.parts {
		if h, ok := p.(H); ok {
			return h, true
		}
	}
	var zero H
	return zero, false
}

// plainUpdate is the update without a part owning it: the optimizer
// steps the gradients backward left (after DDP's average every rank
// holds the same gradients, so DDP's updater is this one after reduce).
type plainUpdate struct{}

func (plainUpdate) reduce(*Trainer) error                        { return nil }
func (plainUpdate) target(t *Trainer) amp.Optimizer              { return t.Opt }
func (plainUpdate) zeroGrad(t *Trainer)                          { t.Opt.ZeroGrad() }
func (plainUpdate) gradNorm(t *Trainer) (float64, error)         { return optim.GradNorm(t.Opt.Params()) }
func (plainUpdate) exportState(t *Trainer) (optim.State, error)  { return t.Opt.Export() }
func (plainUpdate) importState(t *Trainer, st optim.State) error { return t.Opt.Import(st) }
func (plainUpdate) clipGradNorm(t *Trainer, max float64) (float64, error) {
	return t.Opt.ClipGradNorm(max)
}
