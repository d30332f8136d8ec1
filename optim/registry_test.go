package optim_test

import (
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

func TestRegistry(t *testing.T) {
	if got := strings.Join(optim.Names(), ","); got != "adafactor,adam,adam8bit,adamw,adamw8bit,sgd" {
		t.Errorf("Names() = %s", got)
	}
	dev := cpu.New()
	p, err := tensor.FromFloat32(dev, []float32{1, 2, 3}, []int{3}, memory.Parameter)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	p.SetRequiresGrad(true)
	for _, tc := range []struct {
		name  string
		state int64 // optimizer-state bytes after one step
	}{{"sgd", 12}, {"adam", 24}, {"adamw", 24}} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := optim.New(tc.name, []*tensor.Tensor{p}, optim.Settings{LR: 0.1, WeightDecay: 0.01})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Release()
			g, _ := tensor.FromFloat32(dev, []float32{1, 1, 1}, []int{3}, memory.Gradient)
			p.SetGrad(g)
			if err := o.Step(); err != nil {
				t.Fatal(err)
			}
			o.ZeroGrad()
			if got := dev.Memory().Stats().Category(memory.OptimizerState).Current; got != tc.state {
				t.Errorf("%s holds %d bytes of state, want %d", tc.name, got, tc.state)
			}
		})
	}
	if _, err := optim.New("lion", nil, optim.Settings{LR: 1}); err == nil || !strings.Contains(err.Error(), "adam, adam8bit, adamw, adamw8bit, sgd") {
		t.Errorf("unknown optimizer: %v", err)
	}
}
