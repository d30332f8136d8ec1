package optim

import (
	"fmt"
	"math"
	"slices"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Group is a set of parameters that share a learning rate and a weight
// decay. Its fields are used as given: a group with WeightDecay 0 has no
// decay (biases and norms usually), one with LR 0 is held still.
type Group struct {
	Params      []*tensor.Tensor
	LR          float64 // base learning rate; the schedule multiplies it
	WeightDecay float64
}

// rule is one update algorithm: the names of every buffer it may keep, the
// buffers it keeps for one parameter (in order) and the update of one
// parameter.
type rule interface {
	name() string
	buffers() []string
	specs(p *tensor.Tensor) []bufSpec
	update(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs)
}

// bufSpec is one state buffer of one parameter: its name (one of the
// rule's buffers), element type and shape. A rule whose buffers are not
// all one element per parameter element says how they lie through an
// elementsPer(buffer) int method (see Optimizer.ElementsPer).
type bufSpec struct {
	name  string
	dtype tensor.DType
	shape []int
}

// elementSpecs are F32 buffers shaped like p, one per name.
func elementSpecs(p *tensor.Tensor, names []string) []bufSpec {
	out := make([]bufSpec, len(names))
	for i, n := range names {
		out[i] = bufSpec{name: n, dtype: tensor.F32, shape: p.Shape()}
	}
	return out
}

// stepArgs are what one parameter's update needs beyond its tensors.
type stepArgs struct {
	lr, wd    float64 // scheduled learning rate and the group's decay
	gradScale float64 // multiplies the gradient (1/loss-scale)
	t         int     // 1 for the parameter's first update
}

type group struct {
	params []*tensor.Tensor
	lr, wd float64
}

// paramState is what the optimizer keeps for one parameter once it has
// seen a gradient: how many updates it received and the rule's buffers.
type paramState struct {
	steps int
	bufs  []*tensor.Tensor
}

// Optimizer updates parameters from their gradients with one algorithm
// (SGD, Adam or AdamW; see NewSGD, NewAdam, NewAdamW). It keeps state only
// for parameters that have received a gradient at a Step, counted as
// memory.OptimizerState, and releases every temporary it makes.
type Optimizer struct {
	rule   rule
	wd     float64 // the configured decay, given to groups added by AddParams
	groups []*group
	state  map[*tensor.Tensor]*paramState
	steps  int
	sched  Schedule
	// Stochastic rounding of BF16 parameters (SetStochasticRounding).
	rounding  bool
	roundSeed uint64
	// origin maps a piece of a parameter (a ZeRO shard's view) to the
	// parameter it is part of, for the rounding bits (SetRoundingOrigin).
	origin map[*tensor.Tensor]pieceOrigin
}

// pieceOrigin is elements [offset, ...) of the parameter named name.
type pieceOrigin struct {
	name   string
	offset int
}

func newOptimizer(r rule, cfgName string, params []*tensor.Tensor, lr, wd float64, groups []Group) (*Optimizer, error) {
	if err := checkNonNeg(cfgName+".LR", lr); err != nil {
		return nil, err
	}
	if err := checkNonNeg(cfgName+".WeightDecay", wd); err != nil {
		return nil, err
	}
	if len(params) > 0 && lr == 0 {
		return nil, fmt.Errorf("optim: %s.LR is 0; set a learning rate (a schedule multiplies it)", cfgName)
	}
	o := &Optimizer{rule: r, wd: wd, state: map[*tensor.Tensor]*paramState{}}
	if len(params) > 0 {
		if err := o.addGroup(Group{Params: params, LR: lr, WeightDecay: wd}, false, cfgName); err != nil {
			return nil, err
		}
	}
	for i, g := range groups {
		if err := o.addGroup(g, false, fmt.Sprintf("groups[%d]", i)); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Name is the algorithm as registered: "sgd", "adam", "adamw", "adam8bit",
// "adamw8bit" or "adafactor".
func (o *Optimizer) Name() string { return o.rule.name() }

// Params lists the parameters of every group, group by group. A loss
// scaler reads their gradients (Grad) to look for inf and NaN.
func (o *Optimizer) Params() []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, g := range o.groups {
		out = append(out, g.params...)
	}
	return out
}

// Groups returns a copy of the parameter groups with their base learning
// rates (before the schedule) and weight decays.
func (o *Optimizer) Groups() []Group {
	out := make([]Group, len(o.groups))
	for i, g := range o.groups {
		out[i] = Group{Params: append([]*tensor.Tensor(nil), g.params...), LR: g.lr, WeightDecay: g.wd}
	}
	return out
}

// Steps is the number of steps taken; the schedule is evaluated at it.
func (o *Optimizer) Steps() int { return o.steps }

// LR is the learning rate the next Step applies to group i: its base rate
// times the schedule's factor. It is 0 for an index out of range.
func (o *Optimizer) LR(i int) float64 {
	if i < 0 || i >= len(o.groups) {
		return 0
	}
	f := 1.0
	if o.sched != nil {
		f = o.sched.Factor(o.steps)
	}
	return o.groups[i].lr * f
}

// SetLR sets the base learning rate of group i.
func (o *Optimizer) SetLR(i int, lr float64) error {
	if i < 0 || i >= len(o.groups) {
		return fmt.Errorf("optim: SetLR: group %d does not exist (the optimizer has %d)", i, len(o.groups))
	}
	if err := checkNonNeg(fmt.Sprintf("group %d LR", i), lr); err != nil {
		return err
	}
	o.groups[i].lr = lr
	return nil
}

// SetSchedule makes each Step multiply every group's base learning rate by
// s.Factor(Steps()); nil removes the schedule. A schedule with a Validate
// method is checked here.
func (o *Optimizer) SetSchedule(s Schedule) error {
	if v, ok := s.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	o.sched = s
	return nil
}

// AddParams trains more parameters from now on, in a new group with
// learning rate lr and the optimizer's configured weight decay (gradual
// unfreezing). Their state is created at their first step. A parameter
// the optimizer already holds moves to the new group and keeps its state.
func (o *Optimizer) AddParams(lr float64, params ...*tensor.Tensor) error {
	if len(params) == 0 {
		return checkNonNeg("AddParams LR", lr)
	}
	return o.addGroup(Group{Params: params, LR: lr, WeightDecay: o.wd}, true, "AddParams")
}

// AddGroup adds a parameter group. A parameter the optimizer already holds
// moves to the new group and keeps its state.
func (o *Optimizer) AddGroup(g Group) error {
	return o.addGroup(g, true, "AddGroup")
}

func (o *Optimizer) addGroup(g Group, move bool, where string) error {
	if err := checkNonNeg(where+" LR", g.LR); err != nil {
		return err
	}
	if err := checkNonNeg(where+" WeightDecay", g.WeightDecay); err != nil {
		return err
	}
	held := map[*tensor.Tensor]bool{}
	for _, q := range o.Params() {
		held[q] = true
	}
	seen := map[*tensor.Tensor]bool{}
	for i, p := range g.Params {
		if p == nil {
			return fmt.Errorf("optim: %s: parameter %d is nil", where, i)
		}
		if p.Released() {
			return fmt.Errorf("optim: %s: parameter %s is released", where, label(p))
		}
		if !p.DType().IsFloat() {
			return fmt.Errorf("optim: %s: parameter %s is %v; only float parameters can be optimized", where, label(p), p.DType())
		}
		if seen[p] {
			return fmt.Errorf("optim: %s: parameter %s is listed twice", where, label(p))
		}
		seen[p] = true
		if held[p] && !move {
			return fmt.Errorf("optim: %s: parameter %s is already in another group", where, label(p))
		}
	}
	if move {
		for _, og := range o.groups {
			kept := og.params[:0]
			for _, q := range og.params {
				if !seen[q] {
					kept = append(kept, q)
				}
			}
			clear(og.params[len(kept):])
			og.params = kept
		}
	}
	o.groups = append(o.groups, &group{params: append([]*tensor.Tensor(nil), g.Params...), lr: g.LR, wd: g.WeightDecay})
	return nil
}

// DropState frees the optimizer state of params (freezing them frees it);
// they stay in their groups, and should they receive gradients again their
// state starts afresh.
func (o *Optimizer) DropState(params ...*tensor.Tensor) {
	for _, p := range params {
		if st := o.state[p]; st != nil {
			release(st.bufs...)
			delete(o.state, p)
		}
	}
}

// Release frees all optimizer state. The optimizer stays usable: state is
// created again at the next Step.
func (o *Optimizer) Release() {
	for p, st := range o.state {
		release(st.bufs...)
		delete(o.state, p)
	}
}

// StateBytes is the device memory held by the optimizer's state.
func (o *Optimizer) StateBytes() int64 {
	var n int64
	for _, st := range o.state {
		for _, b := range st.bufs {
			n += b.Bytes()
		}
	}
	return n
}

// HasState reports whether the optimizer keeps state for p.
func (o *Optimizer) HasState(p *tensor.Tensor) bool { return o.state[p] != nil }

// inPlaceRule is a rule whose update of a parameter on dev can be one
// fused kernel that allocates nothing.
type inPlaceRule interface{ inPlace(dev device.Device) bool }

// UpdatesInPlace reports whether an update (Step, StepParam) of a
// parameter that has state allocates nothing on its device: each is one
// fused kernel the device has (Adam and AdamW with adam_step, SGD with
// sgd_step, 8-bit Adam always). Adafactor's reductions, a composed
// fallback and stochastic rounding of BF16 parameters make temporaries.
// Package offload runs updates on a goroutine of their own only where
// this holds, so that no allocation's moment depends on that goroutine.
func (o *Optimizer) UpdatesInPlace() bool {
	r, ok := o.rule.(inPlaceRule)
	if !ok {
		return false
	}
	for _, p := range o.Params() {
		if (o.rounding && p.DType() == tensor.BF16) || !r.inPlace(p.Device()) {
			return false
		}
	}
	return true
}

// ZeroGrad releases the gradient of every parameter (set-to-none): the
// memory returns to the allocator, and the next backward allocates fresh
// buffers.
func (o *Optimizer) ZeroGrad() {
	for _, p := range o.Params() {
		p.SetGrad(nil)
	}
}

// Buffers names the state buffers the algorithm may keep per parameter, as
// they appear in State.Tensors keys: exp_avg and exp_avg_sq (Adam, AdamW),
// momentum_buffer (SGD with momentum), the codes and scales of 8-bit Adam
// (see Adam8bit), Adafactor's statistics (see Adafactor), or none.
func (o *Optimizer) Buffers() []string { return slices.Clone(o.rule.buffers()) }

// ElementsPer says how buffer lies along its parameter's elements: each of
// its elements covers that many consecutive parameter elements (1 for
// Adam's moments, device.Quant8Block for 8-bit Adam's scales), so a
// parameter's state can be cut at element ranges that are multiples of
// it (see ShardAlignment for where its update can). 0 means it cannot
// (Adafactor's factored statistics), or that the optimizer keeps no such
// buffer.
func (o *Optimizer) ElementsPer(buffer string) int {
	if !slices.Contains(o.rule.buffers(), buffer) {
		return 0
	}
	if l, ok := o.rule.(interface{ elementsPer(string) int }); ok {
		return l.elementsPer(buffer)
	}
	return 1
}

// ShardAlignment says where a parameter can be cut into pieces that are
// updated independently with the same result as the whole (ZeRO's
// shards): at multiples of the returned number of elements from the
// parameter's first element — 1 for SGD and Adam, device.Quant8Block for
// 8-bit Adam, whose blocks of codes share a scale — or 0 when it must be
// updated whole (Adafactor: its factored statistics, its relative step
// size RMS(x) and its update clipping RMS(u) all span the whole tensor).
func (o *Optimizer) ShardAlignment() int {
	if w, ok := o.rule.(interface{ shardAlignment() int }); ok {
		return w.shardAlignment()
	}
	align := 1
	for _, b := range o.rule.buffers() {
		align = max(align, o.ElementsPer(b))
	}
	return align
}

// ZeroGradInPlace sets every existing gradient to zero, keeping its buffer
// (for code that holds on to gradient tensors). A gradient holding inf or
// NaN, or one that is not contiguous, is replaced by a fresh zero buffer.
func (o *Optimizer) ZeroGradInPlace() error {
	for _, p := range o.Params() {
		if g := p.Grad(); g != nil {
			g.Fill(0)
		}
	}
	return nil
}

// GradsFinite reports whether every gradient of the optimizer's parameters
// is free of inf and NaN (one device pass per gradient), so that a loss
// scaler can skip a step that overflowed.
func (o *Optimizer) GradsFinite() bool {
	for _, p := range o.Params() {
		if g := p.Grad(); g != nil && !g.AllFinite() {
			return false
		}
	}
	return true
}

// ClipGradNorm clips the gradients of the optimizer's parameters by their
// global norm; see the function ClipGradNorm.
func (o *Optimizer) ClipGradNorm(maxNorm float64) (float64, error) {
	return ClipGradNorm(o.Params(), maxNorm)
}

// Step updates every parameter that has a gradient and advances the
// schedule. Parameters without a gradient are skipped and get no state.
func (o *Optimizer) Step() error { return o.StepScaled(1) }

// StepScaled is Step with every gradient multiplied by gradScale inside the
// update, without touching the gradient buffers: a mixed-precision loop
// passes 1/loss-scale to unscale for free. Check the gradients first
// (GradsFinite): a step on inf or NaN poisons parameters and state.
//
// State for parameters seen for the first time is created before any
// parameter changes, so running out of memory there leaves the model as it
// was. An error later in the update (the device failing mid-way) may leave
// some parameters updated and others not.
func (o *Optimizer) StepScaled(gradScale float64) error {
	if !(gradScale > 0) || math.IsInf(gradScale, 0) {
		return fmt.Errorf("optim: gradient scale %v: want a finite number > 0", gradScale)
	}
	factor := 1.0
	if o.sched != nil {
		factor = o.sched.Factor(o.steps)
		if math.IsNaN(factor) || math.IsInf(factor, 0) || factor < 0 {
			return fmt.Errorf("optim: the schedule gives learning-rate factor %v at step %d; want a finite number >= 0", factor, o.steps)
		}
	}
	type job struct {
		p, g *tensor.Tensor
		gr   *group
	}
	var jobs []job
	for _, gr := range o.groups {
		for _, p := range gr.params {
			if p.Released() {
				return fmt.Errorf("optim: parameter %s was released", label(p))
			}
			g := p.Grad()
			if g == nil {
				continue
			}
			if !slices.Equal(g.Shape(), p.Shape()) {
				return fmt.Errorf("optim: the gradient of %s has shape %v but the parameter is %v", label(p), g.Shape(), p.Shape())
			}
			if !p.IsContiguous() {
				return fmt.Errorf("optim: parameter %s is not contiguous; optimizers update parameters in place", label(p))
			}
			jobs = append(jobs, job{p, g, gr})
		}
	}
	fresh := map[*tensor.Tensor]*paramState{}
	for _, j := range jobs {
		if o.state[j.p] != nil || fresh[j.p] != nil {
			continue
		}
		st, err := o.newState(j.p)
		if err != nil {
			for _, f := range fresh {
				release(f.bufs...)
			}
			return fmt.Errorf("optim: creating %s state for %s: %w", o.rule.name(), label(j.p), err)
		}
		fresh[j.p] = st
	}
	for p, st := range fresh {
		o.state[p] = st
	}
	err := tensor.Catch(func() error {
		var b batches
		for _, j := range jobs {
			st := o.state[j.p]
			h := stepArgs{lr: j.gr.lr * factor, wd: j.gr.wd, gradScale: gradScale, t: st.steps + 1}
			if o.batchable(j.p) {
				b.add(o.rule.(groupRule), j.p, j.g, st, h)
				continue
			}
			o.updateOne(j.p, j.g, st.bufs, h)
			st.steps++
		}
		b.run()
		return nil
	})
	if err != nil {
		return fmt.Errorf("optim: step %d: %w", o.steps, err)
	}
	o.steps++
	return nil
}

// StepParam updates p alone, from its gradient, exactly as Step would in
// the current step (the same learning rate, schedule factor and state),
// creating its state when p has none: the optimizer step inside backward,
// applied to each parameter as soon as its gradient is final. The caller
// ends the step with EndStep once every parameter is updated. A parameter
// without a gradient is left alone.
func (o *Optimizer) StepParam(p *tensor.Tensor, gradScale float64) error {
	if !(gradScale > 0) || math.IsInf(gradScale, 0) {
		return fmt.Errorf("optim: gradient scale %v: want a finite number > 0", gradScale)
	}
	var gr *group
	for _, g := range o.groups {
		if slices.Contains(g.params, p) {
			gr = g
			break
		}
	}
	if gr == nil {
		return fmt.Errorf("optim: %s is not a parameter of this optimizer", label(p))
	}
	g := p.Grad()
	if g == nil {
		return nil
	}
	if !slices.Equal(g.Shape(), p.Shape()) {
		return fmt.Errorf("optim: the gradient of %s has shape %v but the parameter is %v", label(p), g.Shape(), p.Shape())
	}
	if !p.IsContiguous() {
		return fmt.Errorf("optim: parameter %s is not contiguous; optimizers update parameters in place", label(p))
	}
	factor := 1.0
	if o.sched != nil {
		factor = o.sched.Factor(o.steps)
		if math.IsNaN(factor) || math.IsInf(factor, 0) || factor < 0 {
			return fmt.Errorf("optim: the schedule gives learning-rate factor %v at step %d; want a finite number >= 0", factor, o.steps)
		}
	}
	st := o.state[p]
	if st == nil {
		var err error
		if st, err = o.newState(p); err != nil {
			return fmt.Errorf("optim: creating %s state for %s: %w", o.rule.name(), label(p), err)
		}
		o.state[p] = st
	}
	err := tensor.Catch(func() error {
		o.updateOne(p, g, st.bufs, stepArgs{lr: gr.lr * factor, wd: gr.wd, gradScale: gradScale, t: st.steps + 1})
		return nil
	})
	if err != nil {
		return fmt.Errorf("optim: step %d, %s: %w", o.steps, label(p), err)
	}
	st.steps++
	return nil
}

// MakeState creates the state of those of params that have none, in the
// order Step would, all of them or none: an error (out of memory) leaves
// the optimizer as it was. A step made of StepParam calls makes the
// state of every parameter first with it, so that, as with Step, running
// out of memory there changes nothing.
func (o *Optimizer) MakeState(params ...*tensor.Tensor) error {
	want := map[*tensor.Tensor]bool{}
	for _, p := range params {
		want[p] = true
	}
	var order []*tensor.Tensor
	for _, gr := range o.groups {
		for _, p := range gr.params {
			if want[p] {
				delete(want, p)
				if o.state[p] == nil {
					order = append(order, p)
				}
			}
		}
	}
	for _, p := range params {
		if want[p] {
			return fmt.Errorf("optim: %s is not a parameter of this optimizer", label(p))
		}
	}
	fresh := map[*tensor.Tensor]*paramState{}
	for _, p := range order {
		st, err := o.newState(p)
		if err != nil {
			for _, f := range fresh {
				release(f.bufs...)
			}
			return fmt.Errorf("optim: creating %s state for %s: %w", o.rule.name(), label(p), err)
		}
		fresh[p] = st
	}
	for p, st := range fresh {
		o.state[p] = st
	}
	return nil
}

// EndStep ends a step made of StepParam calls: the step count (which the
// schedule reads) advances as Step's does.
func (o *Optimizer) EndStep() { o.steps++ }

// updateOne runs one parameter's update in a scope of its own, so its
// temporaries are released before the next parameter's are made.
func (o *Optimizer) updateOne(p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs) {
	s := tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Temporary))
	defer s.Close()
	if o.rounding && p.DType() == tensor.BF16 {
		o.updateRounded(s, p, g, bufs, h)
		return
	}
	o.rule.update(s, p, g, bufs, h)
}

// A groupRule can update many parameters that share their step arguments
// on one device in a single call: a device with a group kernel then
// launches a few kernels where it would launch one per parameter (on a
// GPU a model's many small biases and norms cost more to launch than to
// update). Each parameter's result is that of its own update.
type groupRule interface {
	// groups reports whether parameters on d are updated in place in
	// groups (the rule's fused kernel and the device's group kernel).
	groups(d device.Device) bool
	// updateGroup updates ps from gs with their state bufs[i].
	updateGroup(ps, gs []*tensor.Tensor, bufs [][]*tensor.Tensor, h stepArgs)
}

// batchable reports whether Step leaves p's update to a group call
// (groupRule): the rule and p's device have one, and p is not rounded
// stochastically.
func (o *Optimizer) batchable(p *tensor.Tensor) bool {
	r, ok := o.rule.(groupRule)
	return ok && !(o.rounding && p.DType() == tensor.BF16) && r.groups(p.Device())
}

// batchKey is what the parameters of one group call share.
type batchKey struct {
	dev device.Device
	h   stepArgs
}

// batch is the parameters of one group call, in Step's order.
type batch struct {
	ps, gs []*tensor.Tensor
	bufs   [][]*tensor.Tensor
	states []*paramState
}

// batches gathers a step's batchable updates by device and step
// arguments (the parameters of a group with the same update count share
// them), in the order of each key's first parameter.
type batches struct {
	rule groupRule
	keys []batchKey
	by   map[batchKey]*batch
}

func (b *batches) add(r groupRule, p, g *tensor.Tensor, st *paramState, h stepArgs) {
	b.rule = r
	k := batchKey{p.Device(), h}
	if b.by == nil {
		b.by = map[batchKey]*batch{}
	}
	bt := b.by[k]
	if bt == nil {
		bt = &batch{}
		b.by[k] = bt
		b.keys = append(b.keys, k)
	}
	bt.ps, bt.gs = append(bt.ps, p), append(bt.gs, g)
	bt.bufs, bt.states = append(bt.bufs, st.bufs), append(bt.states, st)
}

// run makes each batch's group call, in a scope as updateOne's, and
// counts the updates.
func (b *batches) run() {
	for _, k := range b.keys {
		bt := b.by[k]
		func() {
			s := tensor.NewScope(tensor.NoGrad(), tensor.Category(memory.Temporary))
			defer s.Close()
			b.rule.updateGroup(bt.ps, bt.gs, bt.bufs, k.h)
		}()
		for _, st := range bt.states {
			st.steps++
		}
	}
}

// SetStochasticRounding makes every update of a BF16 parameter compute in
// F32 and round the result stochastically into the parameter
// (device.StochasticRoundBF16), so that updates far below half a bf16
// unit survive on average: parameters stored in bf16 with no F32 master
// copy. The random bits of an element come from seed, the parameter's
// name, its update count and the element's index, so runs are
// deterministic and a resumed run continues bit for bit. Other
// parameters are unaffected.
func (o *Optimizer) SetStochasticRounding(seed uint64) {
	o.rounding, o.roundSeed = true, seed
}

// SetRoundingOrigin declares that parameter p is elements [offset,
// offset+p.Len()) of the parameter named name, as a ZeRO shard's piece
// of it is: stochastic rounding then draws for p's elements the bits the
// whole parameter's update would draw for them (the bits depend on the
// parameter's name and each element's index), so a sharded step rounds
// exactly as one process does.
func (o *Optimizer) SetRoundingOrigin(p *tensor.Tensor, name string, offset int) {
	if o.origin == nil {
		o.origin = map[*tensor.Tensor]pieceOrigin{}
	}
	o.origin[p] = pieceOrigin{name, offset}
}

// roundChunk is the elements a rounded update takes at a time (a multiple
// of every elementsPer): its F32 working copy is 4 MiB.
const roundChunk = 1 << 20

// updateRounded is the rule's update of a BF16 parameter on an F32 copy,
// chunk by chunk where the state lies along the elements (the whole
// parameter otherwise), each chunk rounded stochastically back.
func (o *Optimizer) updateRounded(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs) {
	n := p.Len()
	specs := o.rule.specs(p)
	per := make([]int, len(bufs))
	chunk := roundChunk
	for i := range bufs {
		per[i] = o.ElementsPer(specs[i].name)
		if per[i] == 0 {
			chunk = n // factored state: the update needs the whole parameter
		}
	}
	org, ok := o.origin[p]
	if !ok {
		org = pieceOrigin{name: p.Name()}
	}
	seed := o.roundSeed ^ nameHash(org.name) ^ (uint64(h.t) * 0x9e3779b97f4a7c15)
	base := int64(org.offset)
	if chunk >= n {
		if rr, ok := o.rule.(roundingRule); ok && rr.updateRounded(s, p, g, bufs, h, rounding{seed: seed, base: base}) {
			return
		}
		w, wg := s.Cast(p, tensor.F32), s.Cast(g, tensor.F32)
		o.rule.update(s, w, wg, bufs, h)
		wg.Release()
		device.StochasticRoundBF16(p.Device(), p.View(), w.View(), seed, base)
		w.Release()
		return
	}
	pf, gf := s.Reshape(p, n), s.Reshape(g, n)
	bf := make([]*tensor.Tensor, len(bufs))
	for i, b := range bufs {
		bf[i] = s.Reshape(b, b.Len())
	}
	for lo := 0; lo < n; lo += chunk {
		m := min(chunk, n-lo)
		pc, gc := s.Narrow(pf, 0, lo, m), s.Narrow(gf, 0, lo, m)
		bc := make([]*tensor.Tensor, len(bufs))
		for i, b := range bf {
			bc[i] = s.Narrow(b, 0, lo/per[i], (m+per[i]-1)/per[i])
		}
		// The rules take F32 parameters (and the 8-bit one F32 gradients):
		// both are widened exactly.
		w, wg := s.Cast(pc, tensor.F32), s.Cast(gc, tensor.F32)
		o.rule.update(s, w, wg, bc, h)
		wg.Release()
		device.StochasticRoundBF16(p.Device(), pc.View(), w.View(), seed, base+int64(lo))
		w.Release()
		pc.Release()
		gc.Release()
		for _, b := range bc {
			b.Release()
		}
	}
}

// rounding is how a BF16 parameter's update is rounded back: element i
// of the parameter takes the bits of stream seed at base+i
// (device.StochasticRoundBF16), whatever the chunk it is written in.
type rounding struct {
	seed uint64
	base int64
}

// round writes w, the F32 update of elements [at, at+w.Len()) of a
// parameter, into dst, the parameter's BF16 view of them.
func (r rounding) round(dst, w *tensor.Tensor, at int) {
	device.StochasticRoundBF16(dst.Device(), dst.View(), w.View(), r.seed, r.base+int64(at))
}

// A roundingRule updates a BF16 parameter whose state spans it whole
// (Adafactor's factored statistics) by itself, a chunk at a time: each
// chunk of the parameter and the gradient it reads widened to F32, each
// chunk of the parameter it writes rounded back with rnd, so that the
// bits are those of the update on a whole F32 copy without the copy. It
// reports false for a parameter it leaves to the copy.
type roundingRule interface {
	updateRounded(s *tensor.Scope, p, g *tensor.Tensor, bufs []*tensor.Tensor, h stepArgs, rnd rounding) bool
}

// nameHash is FNV-1a of a parameter's name.
func nameHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// newState allocates the rule's zeroed buffers for p.
func (o *Optimizer) newState(p *tensor.Tensor) (*paramState, error) {
	st := &paramState{}
	for _, sp := range o.rule.specs(p) {
		b, err := tensor.New(p.Device(), sp.dtype, sp.shape, memory.OptimizerState)
		if err != nil {
			release(st.bufs...)
			return nil, err
		}
		st.bufs = append(st.bufs, b)
	}
	return st, nil
}

// label names a parameter in messages.
func label(p *tensor.Tensor) string {
	if p.Name() != "" {
		return p.Name()
	}
	return fmt.Sprintf("(unnamed %v %v)", p.DType(), p.Shape())
}

func release(ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.Release()
		}
	}
}

func checkNonNeg(field string, v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("optim: %s = %v is not a finite number", field, v)
	case v < 0:
		return fmt.Errorf("optim: %s = %v is negative", field, v)
	}
	return nil
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("optim: "+format, args...)
}

// checkUnit checks that v lies in [0, 1).
func checkUnit(field string, v float64) error {
	if math.IsNaN(v) || v < 0 || v >= 1 {
		return fmt.Errorf("optim: %s = %v is outside [0, 1)", field, v)
	}
	return nil
}
