package offload

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// The overlapped step (Arm, Finish). Backward completes the gradients
// of the last layers first; the update of those layers' masters needs
// nothing else, so it can run on the host while backward goes on with
// the earlier layers on the device. Arm, just before backward, reserves
// a host gradient for every master (one allocation per master, on the
// caller's goroutine, before anything changes) and arms the parameters'
// tensor.OnGradReady hooks. When a parameter's gradient is complete its
// hook copies it into the reserved buffer, frees the device's, and hands
// the master to one goroutine that runs the host optimizer's StepParam
// for each master it is given, in the order given. Finish waits for that
// goroutine, updates what it was not given, and writes the parameters
// back to the device.
//
// What keeps it exact: the device's parameters do not change until
// Finish (backward may still read any of them), and each update is
// StepParam, which is Step's arithmetic parameter by parameter.
//
// What keeps the accounting exact: every allocation and free happens on
// the caller's goroutine at a point fixed by the order of backward —
// reservation at Arm, the device's gradient freed in its hook, the host
// gradients freed at Finish — and the goroutine allocates nothing, since
// Arm overlaps only an optimizer whose updates allocate nothing
// (Stepper.UpdatesInPlace) and only updates of masters whose state
// exists. So the peaks of both allocators do not depend on how fast the
// goroutine runs, and a plan on meta devices equals the measured run.
//
// When a gradient is complete: a hook may fire once per backward pass
// that adds to the gradient — a parameter used both inside and outside a
// checkpointed segment completes once in the segment's recomputation and
// once in the outer pass — and moving the gradient off the device before
// the last pass would sum its parts in another order. So the first
// armed step with a given optimizer only counts each parameter's calls
// and updates after backward, as Step does (it also creates the
// optimizer's state, all of it or none); later steps move a gradient at
// its parameter's counted call. A parameter with no call in the counted
// step, or fewer calls than counted, is moved and updated at Finish.

// Stepper is what an overlapped step needs of the optimizer built over
// the masters; *optim.Optimizer is one.
type Stepper interface {
	// MakeState creates the state of those of params that have none,
	// all of them or none.
	MakeState(params ...*tensor.Tensor) error
	// StepParam updates one parameter as the current step's Step would.
	StepParam(p *tensor.Tensor, gradScale float64) error
	// EndStep ends a step made of StepParam calls.
	EndStep()
	// HasState reports whether the optimizer keeps state for p.
	HasState(p *tensor.Tensor) bool
	// UpdatesInPlace reports whether an update allocates nothing.
	UpdatesInPlace() bool
}

// overlap is the state of the overlapped step.
type overlap struct {
	opt      Stepper
	hooked   bool // the parameters' OnGradReady hooks are installed
	armed    bool
	observed bool  // a step with opt counted its calls: want holds
	want     []int // per parameter: the call that completes its gradient (0: at Finish)
	torn     bool  // the last failed step had updated some masters

	// This step.
	fires  []int  // OnGradReady calls so far
	moved  []bool // the gradient is on the master
	ready  []bool // the master had state at Arm: the worker may update it
	queued []bool // given to the worker
	done   []bool // updated, or its update began: reset it on failure
	err    error  // the first failure in a hook or the worker

	jobs    chan int // to the worker; nil when none runs
	results chan result
	pending int // jobs whose result is not yet received
}

// result is the worker's answer for one master.
type result struct {
	i   int
	err error
	ran bool // the update ran (err is its outcome) rather than being skipped
}

// Arm makes the coming backward pass hand each trainable parameter's
// gradient to the host as soon as it is complete and update its master
// there, on a goroutine of its own, while backward goes on; Finish then
// ends the step (in place of Step). opt is the optimizer built over
// Masters. Arm reserves the host gradients (memory.Gradient on the
// host) at once: running out of host memory there is an error before
// anything changes.
//
// Arm arms nothing, and the step stays Step's, when opt's updates
// allocate (Adafactor's reductions): their temporaries would be
// allocated at moments that depend on the goroutine's progress. Armed
// reports which it is. Arm only what may update as soon as gradients
// are complete: not when the update needs all of them first (clipping by
// the global norm, a loss scaler's inf/nan check, a loss that may not be
// finite) nor before the last micro-batch of an accumulated step, since
// a hook fires in every backward pass while armed.
//
// The parameters' OnGradReady hooks belong to the Optimizer from the
// first Arm until Release. A step that fails (an error in backward, in
// Finish, or ZeroGrad before Finish) keeps the device's parameters as
// they were and resets the masters to them; if some masters were updated
// already, their optimizer state has taken this step's update, and Torn
// says so: such a step cannot be retried exactly.
func (o *Optimizer) Arm(opt Stepper) error {
	if opt == nil {
		return errors.New("offload: Arm without an optimizer")
	}
	ov := o.ov
	if ov == nil {
		n := len(o.params)
		ov = &overlap{
			want: make([]int, n), fires: make([]int, n),
			moved: make([]bool, n), ready: make([]bool, n), queued: make([]bool, n), done: make([]bool, n),
		}
		o.ov = ov
	}
	if ov.armed {
		return errors.New("offload: already armed (Finish or ZeroGrad ends an armed step)")
	}
	ov.torn = false
	if !opt.UpdatesInPlace() {
		return nil
	}
	if ov.opt != opt {
		ov.opt, ov.observed = opt, false
	}
	if !ov.hooked {
		for i, p := range o.params {
			p.OnGradReady(func(*tensor.Tensor) { o.gradReady(i) })
		}
		ov.hooked = true
	}
	for _, m := range o.masters {
		// Not zeroed: a reserved gradient is either overwritten whole by
		// its parameter's or freed unread.
		err := tensor.Catch(func() error {
			m.SetGrad(m.AllocStorage(o.host, memory.Gradient))
			return nil
		})
		if err != nil {
			for _, m := range o.masters {
				m.SetGrad(nil)
			}
			return fmt.Errorf("offload: reserving the host gradient of %s: %w", m.Name(), err)
		}
	}
	clear(ov.fires)
	clear(ov.moved)
	clear(ov.queued)
	clear(ov.done)
	ov.err = nil
	any := false
	for i, m := range o.masters {
		ov.ready[i] = ov.observed && ov.want[i] > 0 && opt.HasState(m)
		any = any || ov.ready[i]
	}
	if any {
		ov.jobs = make(chan int, len(o.params))
		ov.results = make(chan result, len(o.params))
		go work(opt, o.masters, ov.jobs, ov.results)
	}
	ov.armed = true
	return nil
}

// OverlapStats counts what armed steps did.
type OverlapStats struct {
	Steps int64 // armed steps finished
	// Background is the master updates handed to the host's goroutine
	// during backward (it may finish the last ones after backward);
	// AtFinish those Finish ran itself (every one of the first armed
	// step, which counts; those of parameters whose gradient completed
	// only at Finish).
	Background, AtFinish int64
}

// OverlapStats returns what armed steps did so far.
func (o *Optimizer) OverlapStats() OverlapStats { return o.stats }

// Armed reports whether the step in progress was armed (Arm armed it and
// neither Finish nor ZeroGrad has ended it).
func (o *Optimizer) Armed() bool { return o.ov != nil && o.ov.armed }

// Torn reports whether the last armed step that failed had updated some
// masters, and so some of the optimizer's state, before it failed.
func (o *Optimizer) Torn() bool { return o.ov != nil && o.ov.torn }

// GradHolders returns, in Params' order, the tensor whose Grad holds each
// parameter's gradient now: the parameter, or during an armed step once
// its gradient moved, its master. Norms computed over them (optim's
// GradNorm) sum in the same order as over Params.
func (o *Optimizer) GradHolders() []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(o.params))
	for i, p := range o.params {
		out[i] = p
		if o.Armed() && o.ov.moved[i] {
			out[i] = o.masters[i]
		}
	}
	return out
}

// gradReady is parameter i's OnGradReady hook: it runs on backward's
// goroutine.
func (o *Optimizer) gradReady(i int) {
	ov := o.ov
	if !ov.armed || ov.err != nil {
		return
	}
	ov.fires[i]++
	if !ov.observed || ov.want[i] == 0 || ov.fires[i] < ov.want[i] {
		return
	}
	if ov.moved[i] {
		ov.err = fmt.Errorf("offload: the gradient of %s completed in more backward passes than in the first armed step (%d): was the graph changed, or backward run twice?", o.params[i].Name(), ov.want[i])
		return
	}
	o.handOff(i)
	if ov.ready[i] {
		ov.queued[i] = true
		ov.pending++
		ov.jobs <- i // never blocks: the channel holds every parameter
	}
}

// handOff copies parameter i's gradient into its master's reserved one
// and frees the device's.
func (o *Optimizer) handOff(i int) {
	o.masters[i].Grad().CopyStorageFrom(o.params[i].Grad())
	o.params[i].SetGrad(nil)
	o.ov.moved[i] = true
}

// work updates the masters it is given, in order, until one fails; it
// answers every job, the ones after a failure without running them. It
// touches only host tensors and the optimizer, which is its alone while
// the step is armed; it allocates nothing (Arm checked UpdatesInPlace).
func work(opt Stepper, masters []*tensor.Tensor, jobs <-chan int, results chan<- result) {
	failed := false
	for i := range jobs {
		if failed {
			results <- result{i: i}
			continue
		}
		err := stepOne(opt, masters[i])
		if err != nil {
			err = fmt.Errorf("offload: the host update during backward: %w", err)
			failed = true
		}
		results <- result{i: i, err: err, ran: true}
	}
}

// stepOne is StepParam with any panic turned into an error: nothing may
// escape the worker, whose panic would end the program.
func stepOne(opt Stepper, m *tensor.Tensor) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v\n%s", m.Name(), r, debug.Stack())
		}
	}()
	return opt.StepParam(m, 1)
}

// drain ends the worker: it waits for the answer to every job given.
func (o *Optimizer) drain() {
	ov := o.ov
	if ov.jobs == nil {
		return
	}
	close(ov.jobs)
	for ; ov.pending > 0; ov.pending-- {
		r := <-ov.results
		if r.err != nil && ov.err == nil {
			ov.err = r.err
		}
		ov.done[r.i] = ov.done[r.i] || r.ran
	}
	ov.jobs, ov.results = nil, nil
}

// Finish ends an armed step: it waits for the host updates that backward
// started, moves the gradients backward left on the device, updates
// their masters, writes every updated parameter back to the device and
// frees the host gradients. A parameter without a gradient is neither
// moved nor updated. On an error the step fails as Arm describes.
func (o *Optimizer) Finish() error {
	ov := o.ov
	if ov == nil || !ov.armed {
		return errors.New("offload: Finish without an armed step")
	}
	o.drain()
	if ov.err != nil {
		return o.abort(ov.err)
	}
	var rest, fresh []*tensor.Tensor
	var restIdx []int
	err := tensor.Catch(func() error {
		for i, p := range o.params {
			switch {
			case ov.moved[i]:
			case p.Grad() != nil:
				o.handOff(i)
			default:
				o.masters[i].SetGrad(nil) // nothing came: no update
			}
			if ov.moved[i] && !ov.queued[i] {
				m := o.masters[i]
				rest, restIdx = append(rest, m), append(restIdx, i)
				if !ov.opt.HasState(m) {
					fresh = append(fresh, m)
				}
			}
		}
		return nil
	})
	if err == nil {
		err = ov.opt.MakeState(fresh...)
	}
	if err != nil {
		return o.abort(err)
	}
	for k, m := range rest {
		ov.done[restIdx[k]] = true
		if err := ov.opt.StepParam(m, 1); err != nil {
			return o.abort(err)
		}
	}
	ov.opt.EndStep()
	err = tensor.Catch(func() error {
		for i, p := range o.params {
			if ov.moved[i] {
				p.CopyStorageFrom(o.masters[i])
			}
		}
		return nil
	})
	if !ov.observed && err == nil {
		copy(ov.want, ov.fires)
		ov.observed = true
	}
	if err == nil {
		o.stats.Steps++
		o.stats.AtFinish += int64(len(rest))
		for _, q := range ov.queued {
			if q {
				o.stats.Background++
			}
		}
	}
	o.disarm()
	if err != nil {
		// Some parameters may hold this step's values and some the last's.
		ov.torn = true
		return fmt.Errorf("offload: writing the parameters back to the device: %w", err)
	}
	return nil
}

// abort ends an armed step that failed (err) or is discarded (nil): the
// masters the step updated are reset to the device's parameters, which
// it has not changed, and every gradient is freed on both sides.
func (o *Optimizer) abort(err error) error {
	ov := o.ov
	o.drain()
	n := 0
	rerr := tensor.Catch(func() error {
		for i, d := range ov.done {
			if d {
				o.masters[i].CopyStorageFrom(o.params[i])
				n++
			}
		}
		return nil
	})
	ov.torn = n > 0
	o.disarm()
	if n > 0 && err != nil {
		err = fmt.Errorf("%w (the host had begun updating %d of %d masters: they are reset to the device's parameters, and their optimizer state keeps this step's update)", err, n, len(o.masters))
	}
	if rerr != nil {
		err = errors.Join(err, fmt.Errorf("offload: resetting the masters: %w", rerr))
	}
	return err
}

// disarm frees every gradient on both sides and ends the armed step.
func (o *Optimizer) disarm() {
	for i, p := range o.params {
		p.SetGrad(nil)
		o.masters[i].SetGrad(nil)
	}
	o.ov.armed = false
}
