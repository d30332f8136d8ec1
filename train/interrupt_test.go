package train

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
)

// cancellingDevice cancels a context at its at-th allocation: inside a
// step, between one op and the next.
type cancellingDevice struct {
	device.Device
	n, at  atomic.Int64
	cancel func()
}

func (d *cancellingDevice) Alloc(size int64, cat memory.Category) (device.Buffer, error) {
	if d.n.Add(1) == d.at.Load() {
		d.cancel()
	}
	return d.Device.Alloc(size, cat)
}

// TestInterruptMidStep: a cancellation inside a step stops it there (the
// step is abandoned, none of it counted), the state of the step before is
// saved, and the run resumed from it ends bit for bit where an
// uninterrupted run does, its batch taken again.
func TestInterruptMidStep(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		mid  bool // stopped inside the step, not at its end
	}{
		{"plain", func(*Config) {}, true},
		{"accum bf16 checkpoint", func(c *Config) { c.Memory.Accum, c.Precision.AMP, c.Memory.Checkpoint = 2, "bf16", "every" }, true},
		// The update runs during backward: the step ends whole.
		{"step in backward", func(c *Config) { c.Memory.StepInBackward = true }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyGPT()
			cfg.Optim.Steps, cfg.Model.Dropout = 4, 0.1
			tc.set(&cfg)
			dir := t.TempDir()
			run := func(cfg Config, cancelAt int64) (*Trainer, Summary, error) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cfg = cfg.Resolved()
				dev := &cancellingDevice{Device: cpu.New(), cancel: cancel}
				tr, err := New(cfg, dev, nil)
				if err != nil {
					t.Fatal(err)
				}
				if cancelAt > 0 {
					// Count from the second step's first allocation on.
					tr.Hooks.AfterStep = func(tr *Trainer, r Record) error {
						if r.Step == 1 {
							dev.n.Store(0)
							dev.at.Store(cancelAt)
						}
						return nil
					}
				}
				s, err := tr.Run(ctx)
				return tr, s, err
			}
			whole := cfg
			whole.Output.Save = filepath.Join(dir, "whole")
			tw, _, err := run(whole, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer tw.Close()

			cut := cfg
			cut.Output.Save = filepath.Join(dir, "cut")
			tc1, _, err := run(cut, 40)
			if !errors.Is(err, ErrInterrupted) {
				t.Fatalf("interrupted run: %v, want ErrInterrupted", err)
			}
			want := 1 // the second step abandoned
			if !tc.mid {
				want = 2 // it ends, then the run stops
			}
			if tc1.Step() != want {
				t.Errorf("stopped after %d steps, want %d", tc1.Step(), want)
			}
			if tc1.Device.Memory().Interrupted() != nil {
				t.Errorf("the device's allocator is still interrupted")
			}
			tc1.Close()
			again := cut
			again.Output.Resume = cut.Output.Save
			ta, _, err := run(again, -1)
			if err != nil {
				t.Fatal(err)
			}
			defer ta.Close()
			for i, p := range tw.Model.Parameters() {
				if q := ta.Model.Parameters()[i]; !slices.Equal(p.Float32s(), q.Float32s()) {
					t.Fatalf("%s differs from the uninterrupted run's after resuming", p.Name())
				}
			}
		})
	}
}
