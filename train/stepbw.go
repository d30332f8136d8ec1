package train

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/tensor"
)

// The optimizer step inside backward (Config.StepInBackward): every
// trainable parameter's tensor.OnGradReady hook applies its update
// (optim.Optimizer.StepParam) as soon as its gradient is final and frees
// the gradient at once, so the gradients of a step never exist together:
// the gradient peak is the largest set final at one time (a layer's, or a
// tied weight's, whose gradient waits for both uses) instead of all of
// them. The update is Step's, parameter by parameter, so the results are
// the ordinary step's bit for bit. What needs every gradient before any
// update is refused (Config.Validate): accumulation over micro-batches,
// fp16 loss scaling, clipping by the global norm, data parallelism. A
// step whose loss is not finite updates nothing: the loss is checked
// before backward begins. Running out of memory during backward cannot be
// retried with more micro-batches (some parameters are updated already):
// it ends the run with the error.

// armStepInBackward installs the hooks on every parameter of the model
// (frozen ones never fire: they get no gradient).
func (t *Trainer) armStepInBackward() {
	t.bwDone = map[*tensor.Tensor]bool{}
	for _, p := range t.Model.Parameters() {
		p.OnGradReady(func(leaf *tensor.Tensor) {
			if t.bwSkip || t.bwErr != nil {
				return
			}
			if t.bwDone[leaf] {
				// Used both inside and outside a checkpointed segment:
				// each pass completes a part of its gradient.
				t.bwErr = fmt.Errorf("parameter %s received its gradient in two passes (used both inside and outside a checkpointed segment), so it cannot be updated once during backward; train without -step-in-backward or checkpoint differently", leaf.Name())
				return
			}
			t.bwDone[leaf] = true
			if err := t.Opt.StepParam(leaf, 1); err != nil {
				t.bwErr = err
				return
			}
			leaf.SetGrad(nil) // freed as a gradient: the memory never counts as anything else
		})
	}
}

// checkLossBeforeBackward records whether the coming backward may update
// parameters: only when the loss is finite.
func (t *Trainer) checkLossBeforeBackward(loss float64) {
	t.bwSkip = math.IsNaN(loss) || math.IsInf(loss, 0)
}

// endStepInBackward finishes a step whose updates ran during backward.
func (t *Trainer) endStepInBackward() error {
	err := t.bwErr
	t.bwErr, t.bwSkip = nil, false
	clear(t.bwDone)
	if err != nil {
		return fmt.Errorf("step %d: update during backward: %w", t.step+1, err)
	}
	t.Opt.EndStep()
	return nil
}
