package freeze

import (
	"fmt"
	"sort"

	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/tensor"
)

// StateDropper is the part of an optimizer freezing needs: forgetting the
// state of parameters that will not be trained.
type StateDropper interface {
	DropState(params ...*tensor.Tensor)
}

// Adder is the part of an optimizer gradual unfreezing needs: training
// more parameters from now on, at their own learning rate.
type Adder interface {
	AddParams(lr float64, params ...*tensor.Tensor) error
}

// Apply freezes the parameters of m matched by patterns: they stop
// requiring gradients and their gradient buffers are freed; when opt is not
// nil their optimizer state is dropped too. It returns the frozen
// parameters.
func Apply(m nn.Module, opt StateDropper, patterns ...string) ([]*tensor.Tensor, error) {
	ps, err := selectParams(m, patterns)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		p.SetRequiresGrad(false)
		p.SetGrad(nil)
	}
	if opt != nil && len(ps) > 0 {
		opt.DropState(ps...)
	}
	return ps, nil
}

// Unfreeze makes the matched parameters trainable again and, when opt is
// not nil, hands them to it at learning rate lr (their optimizer state
// starts from zero, created at their first step).
func Unfreeze(m nn.Module, opt Adder, lr float64, patterns ...string) ([]*tensor.Tensor, error) {
	ps, err := selectParams(m, patterns)
	if err != nil {
		return nil, err
	}
	var newly []*tensor.Tensor
	for _, p := range ps {
		if !p.RequiresGrad() {
			p.SetRequiresGrad(true)
			newly = append(newly, p)
		}
	}
	if opt != nil && len(newly) > 0 {
		if err := opt.AddParams(lr, newly...); err != nil {
			return nil, err
		}
	}
	return newly, nil
}

func selectParams(m nn.Module, patterns []string) ([]*tensor.Tensor, error) {
	params := m.Parameters()
	paths := make([]string, len(params))
	byPath := make(map[string]*tensor.Tensor, len(params))
	for i, p := range params {
		paths[i] = p.Name()
		byPath[p.Name()] = p
	}
	matched, err := Match(paths, patterns...)
	if err != nil {
		return nil, err
	}
	out := make([]*tensor.Tensor, len(matched))
	for i, path := range matched {
		out[i] = byPath[path]
	}
	return out, nil
}

// Stage is one step of a gradual-unfreezing schedule.
type Stage struct {
	Step     int      // unfreeze before this step runs
	Patterns []string // which parameters
	LR       float64  // their learning rate
}

// Schedule unfreezes stages as training reaches their steps.
type Schedule struct {
	stages []Stage
	next   int
}

// NewSchedule orders the stages by step; a stage with no patterns is an
// error.
func NewSchedule(stages ...Stage) (*Schedule, error) {
	st := append([]Stage(nil), stages...)
	sort.SliceStable(st, func(i, j int) bool { return st[i].Step < st[j].Step })
	for _, s := range st {
		if len(s.Patterns) == 0 {
			return nil, fmt.Errorf("freeze: unfreeze stage at step %d names no parameters", s.Step)
		}
	}
	return &Schedule{stages: st}, nil
}

// Advance unfreezes every stage whose step is <= step and has not run yet,
// returning the parameters it made trainable.
func (s *Schedule) Advance(step int, m nn.Module, opt Adder) ([]*tensor.Tensor, error) {
	var out []*tensor.Tensor
	for s.next < len(s.stages) && s.stages[s.next].Step <= step {
		st := s.stages[s.next]
		ps, err := Unfreeze(m, opt, st.LR, st.Patterns...)
		if err != nil {
			return out, err
		}
		out = append(out, ps...)
		s.next++
	}
	return out, nil
}
