package optim

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"maps"
	"slices"
	"strings"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// State is an optimizer's state as a plain value, for checkpoints. Export
// makes one; Import restores it exactly. Parameters are named by their
// paths (tensor Name), so a state applies to any optimizer over a model
// with the same parameter paths and shapes.
type State struct {
	// Algorithm is the registered name: "sgd", "adam", "adamw", "adam8bit",
	// "adamw8bit" or "adafactor".
	Algorithm string `json:"algorithm"`
	// Step is the number of steps taken (where the schedule stands).
	Step int `json:"step"`
	// Groups are the parameter groups with their base hyper-parameters.
	Groups []GroupState `json:"groups"`
	// ParamSteps is the number of updates each parameter with state has
	// received (Adam's bias correction, SGD's first momentum step).
	ParamSteps map[string]int `json:"param_steps,omitempty"`
	// Tensors holds every buffer, keyed "<parameter path>.<buffer>" with
	// buffer exp_avg or exp_avg_sq (Adam, AdamW) or momentum_buffer (SGD).
	Tensors map[string]StateTensor `json:"tensors,omitempty"`
}

// GroupState is one parameter group in a State.
type GroupState struct {
	LR          float64  `json:"lr"` // base learning rate, before the schedule
	WeightDecay float64  `json:"weight_decay"`
	Params      []string `json:"params"` // parameter paths
}

// StateTensor is one F32 state buffer and its shape, the shape of its
// parameter.
type StateTensor struct {
	Shape []int
	Data  []float32
}

// Export copies the optimizer's state to the host. Every parameter must
// have a name, distinct from the others'.
func (o *Optimizer) Export() (State, error) {
	st := State{
		Algorithm:  o.rule.name(),
		Step:       o.steps,
		ParamSteps: map[string]int{},
		Tensors:    map[string]StateTensor{},
	}
	named := map[string]*tensor.Tensor{}
	for gi, g := range o.groups {
		gs := GroupState{LR: g.lr, WeightDecay: g.wd, Params: make([]string, 0, len(g.params))}
		for pi, p := range g.params {
			name := p.Name()
			if name == "" {
				return State{}, errorf("Export: parameter %d of group %d (%v %v) has no name; name parameters (SetName) to save their state", pi, gi, p.DType(), p.Shape())
			}
			if q := named[name]; q != nil && q != p {
				return State{}, errorf("Export: two parameters are named %s", name)
			}
			named[name] = p
			gs.Params = append(gs.Params, name)
		}
		st.Groups = append(st.Groups, gs)
	}
	err := tensor.Catch(func() error {
		for _, p := range o.Params() {
			ps := o.state[p]
			if ps == nil {
				continue
			}
			st.ParamSteps[p.Name()] = ps.steps
			for i, sp := range o.rule.specs(p) {
				st.Tensors[p.Name()+"."+sp.name] = StateTensor{Shape: slices.Clone(sp.shape), Data: hostValues(ps.bufs[i])}
			}
		}
		return nil
	})
	if err != nil {
		return State{}, fmt.Errorf("optim: Export: %w", err)
	}
	return st.Compact(), nil
}

// Compact returns s with its empty maps as nil, as JSON decodes an
// omitted field: every exporter (the sharded ones too) gives the same
// State for the same state.
func (s State) Compact() State {
	if len(s.Tensors) == 0 {
		s.Tensors = nil
	}
	if len(s.ParamSteps) == 0 {
		s.ParamSteps = nil
	}
	return s
}

// Import replaces the optimizer's state with st: the step count, the
// groups (each parameter moves to the group st puts it in, with that
// group's learning rate and weight decay; parameters st does not mention
// keep their own), the per-parameter step counts and every buffer. It
// checks everything before changing anything: st must be for the same
// algorithm, and every parameter it names must be one of the optimizer's,
// with the same shape. Afterwards the optimizer continues exactly where the
// exported one stood. The old state is freed before the new one is
// allocated; should the device run out of memory in between, the
// optimizer is left with no state and the error says whose failed.
func (o *Optimizer) Import(st State) error {
	if st.Algorithm != o.rule.name() {
		return errorf("state is for %q; this optimizer is %s", st.Algorithm, o.rule.name())
	}
	if st.Step < 0 {
		return errorf("state has step %d; want >= 0", st.Step)
	}
	byName := map[string]*tensor.Tensor{}
	dup := map[string]bool{}
	for _, p := range o.Params() {
		if n := p.Name(); n != "" {
			if byName[n] != nil {
				dup[n] = true
			}
			byName[n] = p
		}
	}
	lookup := func(name string) (*tensor.Tensor, error) {
		switch {
		case dup[name]:
			return nil, errorf("state for %s: two parameters of the optimizer have this name", name)
		case byName[name] == nil:
			return nil, errorf("state for %s: the optimizer has no parameter of that name", name)
		}
		return byName[name], nil
	}

	groups := o.groups
	if len(st.Groups) > 0 {
		groups = nil
		placed := map[*tensor.Tensor]bool{}
		for i, gs := range st.Groups {
			if err := checkNonNeg(fmt.Sprintf("state group %d LR", i), gs.LR); err != nil {
				return err
			}
			if err := checkNonNeg(fmt.Sprintf("state group %d WeightDecay", i), gs.WeightDecay); err != nil {
				return err
			}
			g := &group{lr: gs.LR, wd: gs.WeightDecay}
			for _, name := range gs.Params {
				p, err := lookup(name)
				if err != nil {
					return err
				}
				if placed[p] {
					return errorf("state puts %s in two groups", name)
				}
				placed[p] = true
				g.params = append(g.params, p)
			}
			groups = append(groups, g)
		}
		for _, og := range o.groups {
			g := &group{lr: og.lr, wd: og.wd}
			for _, p := range og.params {
				if !placed[p] {
					g.params = append(g.params, p)
				}
			}
			if len(g.params) > 0 {
				groups = append(groups, g)
			}
		}
	}

	bufs := o.rule.buffers()
	data := map[*tensor.Tensor][][]float32{}
	for _, key := range slices.Sorted(maps.Keys(st.Tensors)) {
		t := st.Tensors[key]
		i := strings.LastIndexByte(key, '.')
		if i < 0 {
			return errorf("state tensor %q is not named <parameter>.<buffer>", key)
		}
		name, buf := key[:i], key[i+1:]
		if !slices.Contains(bufs, buf) {
			keeps := "no buffers"
			if len(bufs) > 0 {
				keeps = strings.Join(bufs, " and ")
			}
			return errorf("state tensor %s: %s keeps %s, not %s", key, o.describe(), keeps, buf)
		}
		p, err := lookup(name)
		if err != nil {
			return err
		}
		specs := o.rule.specs(p)
		bi := slices.IndexFunc(specs, func(sp bufSpec) bool { return sp.name == buf })
		if bi < 0 {
			return errorf("state tensor %s: %s keeps no %s for a parameter of shape %v", key, o.describe(), buf, p.Shape())
		}
		sp := specs[bi]
		if !slices.Equal(t.Shape, sp.shape) {
			if slices.Equal(sp.shape, p.Shape()) {
				return errorf("state for %s has shape %v but the parameter is %v", name, t.Shape, p.Shape())
			}
			return errorf("state tensor %s has shape %v; %s keeps %v for parameter shape %v", key, t.Shape, o.describe(), sp.shape, p.Shape())
		}
		if n := numel(sp.shape); len(t.Data) != n {
			return errorf("state tensor %s holds %d values for shape %v (%d elements)", key, len(t.Data), t.Shape, n)
		}
		if sp.dtype == tensor.U8 {
			for j, v := range t.Data {
				if !(v >= 0 && v <= 255 && v == float32(int(v))) {
					return errorf("state tensor %s: value %v at %d is not a code (an integer in [0, 255])", key, v, j)
				}
			}
		}
		if data[p] == nil {
			data[p] = make([][]float32, len(specs))
		}
		data[p][bi] = t.Data
	}
	steps := map[*tensor.Tensor]int{}
	for _, name := range slices.Sorted(maps.Keys(st.ParamSteps)) {
		p, err := lookup(name)
		if err != nil {
			return err
		}
		if n := st.ParamSteps[name]; n < 0 {
			return errorf("state for %s has step count %d; want >= 0", name, n)
		}
		steps[p] = st.ParamSteps[name]
	}
	for p, d := range data {
		for i, sp := range o.rule.specs(p) {
			if d[i] == nil {
				return errorf("state for %s lacks its %s", p.Name(), sp.name)
			}
		}
		if steps[p] < 1 {
			return errorf("state for %s has buffers but step count %d; want >= 1", p.Name(), steps[p])
		}
	}
	for p, n := range steps {
		if specs := o.rule.specs(p); n > 0 && len(specs) > 0 && data[p] == nil {
			return errorf("state for %s has step count %d but lacks its %s", p.Name(), n, specs[0].name)
		}
	}

	// Everything checked: free the old state first, so that the new one
	// does not need room beside it.
	o.Release()
	o.groups = groups
	o.steps = st.Step
	for _, p := range o.Params() {
		n, ok := steps[p]
		if !ok {
			continue
		}
		ps := &paramState{steps: n}
		for i, sp := range o.rule.specs(p) {
			if data[p] == nil {
				break
			}
			b, err := fromValues(p.Device(), sp, data[p][i])
			if err != nil {
				release(ps.bufs...)
				o.Release()
				return fmt.Errorf("optim: restoring the state of %s: %w", p.Name(), err)
			}
			ps.bufs = append(ps.bufs, b)
		}
		o.state[p] = ps
	}
	return nil
}

// describe names the algorithm and its configuration in messages.
func (o *Optimizer) describe() string {
	if r, ok := o.rule.(sgdRule); ok && r.momentum == 0 {
		return "sgd without momentum"
	}
	return o.rule.name()
}

// hostValues copies a state buffer to the host as float32s: F32 as it is,
// U8 codes as the numbers 0…255 (exact in float32), so that a checkpoint
// stays a file of F32 tensors.
func hostValues(t *tensor.Tensor) []float32 {
	if t.DType() != tensor.U8 {
		return t.Float32s()
	}
	b := t.Uint8s()
	out := make([]float32, len(b))
	for i, c := range b {
		out[i] = float32(c)
	}
	return out
}

// fromValues makes the buffer sp from values hostValues returned.
func fromValues(dev device.Device, sp bufSpec, d []float32) (*tensor.Tensor, error) {
	if sp.dtype != tensor.U8 {
		return tensor.FromFloat32(dev, d, sp.shape, memory.OptimizerState)
	}
	b := make([]uint8, len(d))
	for i, v := range d {
		b[i] = uint8(v)
	}
	return tensor.FromUint8(dev, b, sp.shape, memory.OptimizerState)
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
