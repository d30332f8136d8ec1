package optim

import (
	"fmt"
	"math"
)

// Schedule gives the factor by which an optimizer multiplies every group's
// base learning rate at a step: Factor(0) for the first Step, Factor(1) for
// the second, and so on. Factors must be finite and >= 0.
type Schedule interface {
	Factor(step int) float64
}

// ScheduleFunc adapts a function to Schedule.
type ScheduleFunc func(step int) float64

// Factor returns f(step).
func (f ScheduleFunc) Factor(step int) float64 { return f(step) }

// Constant keeps the base learning rate: its factor is always 1.
type Constant struct{}

// Factor is 1.
func (Constant) Factor(int) float64 { return 1 }

// Warmup raises the learning rate linearly over its first Steps steps,
// (step+1)/Steps, so that the first step is not taken at rate 0, and keeps
// the base rate afterwards.
type Warmup struct {
	Steps int
}

// Factor is min(1, (step+1)/Steps).
func (w Warmup) Factor(step int) float64 {
	if step+1 >= w.Steps {
		return 1
	}
	return float64(step+1) / float64(w.Steps)
}

// Validate checks that Steps is not negative.
func (w Warmup) Validate() error {
	if w.Steps < 0 {
		return fmt.Errorf("optim: Warmup.Steps = %d is negative", w.Steps)
	}
	return nil
}

// WarmupCosine warms up linearly over Warmup steps, as Warmup does, then
// follows a half cosine from 1 at step Warmup down to Floor at step Total,
// and stays at Floor after it (the schedule of GPT-2-style training). Floor
// is a fraction of the base rate: 0.1 decays to a tenth. Warmup 0 is a
// plain cosine decay.
type WarmupCosine struct {
	Warmup, Total int
	Floor         float64
}

// Factor is the schedule's multiplier at step.
func (c WarmupCosine) Factor(step int) float64 {
	switch {
	case step < c.Warmup:
		return float64(step+1) / float64(c.Warmup)
	case step >= c.Total:
		return c.Floor
	}
	r := float64(step-c.Warmup) / float64(c.Total-c.Warmup)
	return c.Floor + (1-c.Floor)*0.5*(1+math.Cos(math.Pi*r))
}

// Validate checks 0 <= Warmup < Total and Floor in [0, 1].
func (c WarmupCosine) Validate() error {
	switch {
	case c.Warmup < 0:
		return fmt.Errorf("optim: WarmupCosine.Warmup = %d is negative", c.Warmup)
	case c.Total <= c.Warmup:
		return fmt.Errorf("optim: WarmupCosine.Total = %d must exceed Warmup = %d", c.Total, c.Warmup)
	case math.IsNaN(c.Floor) || c.Floor < 0 || c.Floor > 1:
		return fmt.Errorf("optim: WarmupCosine.Floor = %v is outside [0, 1]", c.Floor)
	}
	return nil
}
