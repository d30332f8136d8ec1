package train

import (
	"fmt"
	"math"

	"github.com/memfit/memfit/tensor"
)

// stepInBackward applies the optimizer update inside backward: every
// trainable parameter's tensor.OnGradReady hook applies its update
// (optim.Optimizer.StepParam) as soon as its gradient is final and frees
// the gradient at once, so the gradients of a step never exist together:
// the gradient peak is the largest set final at one time (a layer's, or a
// tied weight's, whose gradient waits for both uses) instead of all of
// them. The update is Step's, parameter by parameter, so the results are
// the ordinary step's bit for bit. What needs every gradient before any
// update is refused (its rules): accumulation over micro-batches, fp16
// loss scaling, clipping by the global norm, data parallelism, the
// optimizer offloaded. A step whose loss is not finite updates nothing:
// the loss is checked before backward begins. Running out of memory
// during backward cannot be retried with more micro-batches (some
// parameters are updated already): it ends the run with the error.
var stepInBackward = &technique{
	name:  "step in backward",
	group: "memory",
	doc:   "each parameter's update applied as soon as its gradient is final, the gradient freed at once: the gradients of a step never exist together; exact",
	flags: func(f *Flags, c *Config) {
		f.boolVar(&c.Memory.StepInBackward, "step-in-backward", "apply each parameter's update as soon as its gradient is final, and free the gradient (not with -accum > 1, -amp fp16, -clip or -dist)")
	},
	features: []feature{{
		name: "-step-in-backward",
		on:   func(c *Config) bool { return c.Memory.StepInBackward },
		flag: func(c *Config) string { return "-step-in-backward" },
	}},
	// Each refusal is an update that needs every gradient first.
	refuses: []rule{
		{"-step-in-backward", "-accum", "the update must wait for the last micro-batch's gradients (use -accum 1, or train without -step-in-backward)"},
		{"-step-in-backward", "-amp fp16", "loss scaling skips a step when any gradient overflows, which is known only after the whole backward (use -amp bf16)"},
		{"-step-in-backward", "-clip", "clipping by the global norm needs every gradient first"},
		{"-step-in-backward", "-dist", "gradients are averaged over the ranks before any update"},
	},
	describe: func(c *Config) string {
		if c.Memory.StepInBackward {
			return "step in backward"
		}
		return ""
	},
	fit: &fitAxis{
		// Exact and about free; a tie goes to the run as given.
		options: func(c Config) []Config {
			out := []Config{c}
			if !c.Memory.StepInBackward {
				c.Memory.StepInBackward = true
				out = append(out, c)
			}
			return out
		},
		cost: func(c, orig Config) float64 {
			if c.Memory.StepInBackward != orig.Memory.StepInBackward {
				return 1.01
			}
			return 1
		},
		keepsState: func(c *Config) { c.Memory.StepInBackward = false }, // frees gradients; the state is the same
	},
	build: func(t *Trainer) (any, error) {
		if !t.Config.Memory.StepInBackward {
			return nil, nil
		}
		return &backwardStep{done: map[*tensor.Tensor]bool{}}, nil
	},
}

// backwardStep is the state of a step whose updates run during backward.
type backwardStep struct {
	skip bool                    // the loss is not finite: update nothing
	err  error                   // the first failing update
	done map[*tensor.Tensor]bool // parameters updated in this step
}

// arm installs the hooks on every parameter of the model (frozen ones
// never fire: they get no gradient).
func (b *backwardStep) arm(t *Trainer) {
	for _, p := range t.Model.Parameters() {
		p.OnGradReady(func(leaf *tensor.Tensor) {
			if b.skip || b.err != nil {
				return
			}
			if b.done[leaf] {
				// Used both inside and outside a checkpointed segment:
				// each pass completes a part of its gradient.
				b.err = fmt.Errorf("parameter %s received its gradient in two passes (used both inside and outside a checkpointed segment), so it cannot be updated once during backward; train without -step-in-backward or checkpoint differently", leaf.Name())
				return
			}
			b.done[leaf] = true
			if err := t.Opt.StepParam(leaf, 1); err != nil {
				b.err = err
				return
			}
			leaf.SetGrad(nil) // freed as a gradient: the memory never counts as anything else
		})
	}
}

// afterLoss records whether the coming backward may update parameters:
// only when the loss is finite.
func (b *backwardStep) afterLoss(_ *Trainer, _ microBatch, loss *tensor.Tensor) error {
	l := loss.Item()
	b.skip = math.IsNaN(l) || math.IsInf(l, 0)
	return nil
}

// afterBackward finishes a step whose updates ran during backward.
func (b *backwardStep) afterBackward(t *Trainer, loss float64) (bool, error) {
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		b.reset()
		return false, nil // the trainer skips or fails the step
	}
	err := b.err
	b.reset()
	if err != nil {
		return true, fmt.Errorf("step %d: update during backward: %w", t.step+1, err)
	}
	t.Opt.EndStep()
	return true, nil
}

func (b *backwardStep) abortStep(_ *Trainer, err error) error {
	if b.err != nil {
		err = fmt.Errorf("%w (and an update during backward: %v)", err, b.err)
	}
	b.reset()
	return err
}

func (b *backwardStep) reset() {
	b.err, b.skip = nil, false
	clear(b.done)
}

func (b *backwardStep) vetoRetry(t *Trainer, err error) error {
	return fmt.Errorf("step %d: %w (with -step-in-backward a step cannot be retried in more micro-batches: some parameters were already updated)", t.step+1, err)
}

// tearsMidStep: the updates run during backward.
func (b *backwardStep) tearsMidStep(*Trainer) bool { return true }
