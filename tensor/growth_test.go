package tensor_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/tensor"
)

// sgd is a plain SGD update in a no-grad scope, setting gradients to none
// as optimizers do.
func sgd(params []*tensor.Tensor, lr float64) {
	s := tensor.NewScope(tensor.NoGrad())
	defer s.Close()
	for _, p := range params {
		if g := p.Grad(); g != nil {
			s.AddInPlace(p, s.MulScalar(g, -lr))
			p.SetGrad(nil)
		}
	}
}

func TestGrowthDetectorNamesKeptLoss(t *testing.T) {
	for _, backward := range []bool{true, false} {
		name := "kept after backward"
		if !backward {
			name = "kept with its graph"
		}
		t.Run(name, func(t *testing.T) {
			defer tensor.TrackLeaks(false)
			dev := cpu.New()
			m := newMLP(t, dev, 8, 16, 4)
			x, y := batch(t, dev, 4, 8, 4)
			defer func() {
				for _, p := range append(m.params(), x, y) {
					p.Release()
				}
			}()
			var warnings []string
			d := tensor.NewGrowthDetector(dev.Memory(), 5, func(msg string) { warnings = append(warnings, msg) })
			var losses []*tensor.Tensor // the leak: every step's loss, with its graph
			defer func() {
				for _, l := range losses {
					l.Release()
				}
			}()
			var site string
			warnedAt := -1
			for step := range 20 {
				s := tensor.NewScope()
				_, file, line, _ := runtime.Caller(0)
				loss := s.CrossEntropy(m.forward(s, x), y, tensor.CrossEntropyOptions{})
				site = fmt.Sprintf("%s:%d", file, line+1)
				losses = append(losses, s.Keep(loss))
				if backward {
					loss.Backward()
				}
				s.Close()
				sgd(m.params(), 0.1)
				d.Observe(step)
				if d.Warned() && warnedAt < 0 {
					warnedAt = step
				}
			}
			if len(warnings) != 1 {
				t.Fatalf("%d warnings, want 1: %q", len(warnings), warnings)
			}
			if warnedAt < 0 || warnedAt >= 10 {
				t.Errorf("warned after step %d, want within 10 steps", warnedAt)
			}
			msg := warnings[0]
			t.Log(msg)
			for _, want := range []string{site + ": +5 tensors", "holding their autograd graphs", "grew at each of the last 5 step boundaries"} {
				if !strings.Contains(msg, want) {
					t.Errorf("warning lacks %q:\n%s", want, msg)
				}
			}
			if !backward && !strings.Contains(msg, "of saved tensors alive") {
				t.Errorf("warning does not mention the saved activations:\n%s", msg)
			}
			if strings.Contains(msg, "lifetime_test.go") || strings.Contains(msg, "growth_test.go:2") {
				t.Errorf("warning names sites that do not grow:\n%s", msg)
			}
		})
	}
}

func TestGrowthDetectorQuietOnCorrectLoop(t *testing.T) {
	defer tensor.TrackLeaks(false)
	dev := cpu.New()
	m := newMLP(t, dev, 4, 8, 3)
	defer func() {
		for _, p := range m.params() {
			p.Release()
		}
	}()
	var warnings []string
	d := tensor.NewGrowthDetector(dev.Memory(), 3, func(msg string) { warnings = append(warnings, msg) })
	var logged float64
	for step := range 1000 {
		x, y := batch(t, dev, 2, 4, 3) // a new batch every step
		err := tensor.Step(func(s *tensor.Scope) error {
			loss := s.CrossEntropy(m.forward(s, x), y, tensor.CrossEntropyOptions{})
			loss.Backward()
			logged += loss.Item() // a float, not the tensor
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		x.Release()
		y.Release()
		sgd(m.params(), 0.01)
		d.Observe(step)
	}
	if len(warnings) != 0 {
		t.Errorf("a correct loop drew a warning: %s", warnings[0])
	}
}

func TestGrowthDetectorOutsideTensors(t *testing.T) {
	defer tensor.TrackLeaks(false)
	dev := cpu.New()
	var warnings []string
	d := tensor.NewGrowthDetector(dev.Memory(), 2, func(msg string) { warnings = append(warnings, msg) })
	mem := dev.Memory()
	for step := range 4 {
		b, err := mem.Alloc(int64(1024*(step+1)), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Free(b)
		d.Observe(step)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "no tensor handle made in those steps is still alive") ||
		!strings.Contains(warnings[0], "EnableHistory") {
		t.Errorf("warnings %q", warnings)
	}
}

// A detached copy of the loss holds the loss's storage through a handle
// leak tracking does not see; the allocator's history names the site.
func TestGrowthDetectorDetachedLoss(t *testing.T) {
	defer tensor.TrackLeaks(false)
	dev := cpu.New()
	m := newMLP(t, dev, 8, 16, 4)
	x, y := batch(t, dev, 4, 8, 4)
	defer func() {
		for _, p := range append(m.params(), x, y) {
			p.Release()
		}
	}()
	mem := dev.Memory()
	mem.EnableHistory(1 << 14)
	tensor.EnableAllocSites(mem)
	defer mem.SetSiteFunc(nil)
	var warnings []string
	d := tensor.NewGrowthDetector(mem, 4, func(msg string) { warnings = append(warnings, msg) })
	var kept []*tensor.Tensor
	var site, detachSite string
	for step := range 10 {
		s := tensor.NewScope()
		_, file, line, _ := runtime.Caller(0)
		loss := s.CrossEntropy(m.forward(s, x), y, tensor.CrossEntropyOptions{})
		site = fmt.Sprintf("%s:%d", file, line+1)
		detachSite = fmt.Sprintf("%s:%d", file, line+4)
		kept = append(kept, s.Keep(s.Detach(loss)))
		loss.Backward()
		s.Close()
		sgd(m.params(), 0.1)
		d.Observe(step)
	}
	for _, l := range kept {
		l.Release()
	}
	if len(warnings) != 1 {
		t.Fatalf("%d warnings, want 1: %q", len(warnings), warnings)
	}
	t.Log(warnings[0])
	// The detached handle is tracked, so the warning names the Detach line
	// (the allocator-history fallback would name the loss's line).
	if !strings.Contains(warnings[0], detachSite+": +4 tensors") && !strings.Contains(warnings[0], site+": 4 blocks") {
		t.Errorf("warning names neither %s nor %s:\n%s", detachSite, site, warnings[0])
	}
}
