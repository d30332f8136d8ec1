package optim_test

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// clone makes a copy of m's parameters (same names and values) on its
// device, sharing the batch.
func (m *mlp) clone(t testing.TB) *mlp {
	t.Helper()
	cp := func(p *tensor.Tensor) *tensor.Tensor {
		q, err := tensor.FromFloat32(p.Device(), p.Float32s(), p.Shape(), memory.Parameter)
		if err != nil {
			t.Fatal(err)
		}
		return q.SetRequiresGrad(p.RequiresGrad()).SetName(p.Name())
	}
	return &mlp{w1: cp(m.w1), b1: cp(m.b1), w2: cp(m.w2), b2: cp(m.b2), x: m.x, y: m.y}
}

// Resuming from exported state gives bit-identical parameters after more
// steps, for every algorithm, with groups and a schedule, through JSON.
func TestStateRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		make func(m *mlp) (*optim.Optimizer, error)
	}{
		{"sgd", func(m *mlp) (*optim.Optimizer, error) {
			return optim.NewSGD(m.params(), optim.SGD{LR: 0.05})
		}},
		{"sgd-nesterov", func(m *mlp) (*optim.Optimizer, error) {
			return optim.NewSGD([]*tensor.Tensor{m.w1, m.w2}, optim.SGD{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3},
				optim.Group{Params: []*tensor.Tensor{m.b1, m.b2}, LR: 0.1})
		}},
		{"adam", func(m *mlp) (*optim.Optimizer, error) {
			return optim.NewAdam(m.params(), optim.Adam{LR: 1e-2, WeightDecay: 1e-2})
		}},
		{"adamw", func(m *mlp) (*optim.Optimizer, error) {
			return optim.NewAdamW([]*tensor.Tensor{m.w1, m.w2}, optim.AdamW{LR: 1e-2, WeightDecay: 0.1},
				optim.Group{Params: []*tensor.Tensor{m.b1, m.b2}, LR: 3e-2})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := cpu.New()
			a := newMLP(t, dev, 6, 10, 3, 4, 21)
			a.b2.SetRequiresGrad(false) // frozen for the first steps: no state
			oa, err := c.make(a)
			if err != nil {
				t.Fatal(err)
			}
			sched := optim.WarmupCosine{Warmup: 2, Total: 8, Floor: 0.1}
			if err := oa.SetSchedule(sched); err != nil {
				t.Fatal(err)
			}
			train := func(m *mlp, o *optim.Optimizer, n int) {
				for range n {
					m.backward(t)
					if err := o.Step(); err != nil {
						t.Fatal(err)
					}
					o.ZeroGrad()
				}
			}
			train(a, oa, 3)
			a.b2.SetRequiresGrad(true)
			if err := oa.AddParams(5e-3, a.b2); err != nil {
				t.Fatal(err)
			}
			train(a, oa, 1)

			st, err := oa.Export()
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			var st2 optim.State
			if err := json.Unmarshal(js, &st2); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(st, st2) {
				t.Fatal("State does not survive a JSON round trip")
			}

			// The resumed run: same parameter values, an optimizer built as
			// at the start (one group per constructor), then Import.
			b := a.clone(t)
			ob, err := c.make(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := ob.SetSchedule(sched); err != nil {
				t.Fatal(err)
			}
			if err := ob.Import(st2); err != nil {
				t.Fatal(err)
			}
			if ob.Steps() != 4 || len(ob.Groups()) != len(oa.Groups()) {
				t.Fatalf("resumed at step %d with %d groups; want 4 and %d", ob.Steps(), len(ob.Groups()), len(oa.Groups()))
			}
			if ob.StateBytes() != oa.StateBytes() {
				t.Errorf("state bytes %d resumed, %d original", ob.StateBytes(), oa.StateBytes())
			}
			train(a, oa, 4)
			train(b, ob, 4)
			for i, p := range a.params() {
				q := b.params()[i]
				pv, qv := p.Float32s(), q.Float32s()
				for j := range pv {
					if math.Float32bits(pv[j]) != math.Float32bits(qv[j]) {
						t.Fatalf("%s[%d]: %v original, %v resumed", p.Name(), j, pv[j], qv[j])
					}
				}
			}
			sa, _ := oa.Export()
			sb, _ := ob.Export()
			if !reflect.DeepEqual(sa, sb) {
				t.Error("states differ after the same steps")
			}
		})
	}
}

func TestImportErrors(t *testing.T) {
	dev := cpu.New()
	m := newMLP(t, dev, 6, 10, 3, 4, 2)
	opt, err := optim.NewAdamW(m.params(), optim.AdamW{LR: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	m.backward(t)
	if err := opt.Step(); err != nil {
		t.Fatal(err)
	}
	good, err := opt.Export()
	if err != nil {
		t.Fatal(err)
	}
	if len(good.Tensors) != 8 || len(good.ParamSteps) != 4 {
		t.Fatalf("exported %d tensors and %d step counts, want 8 and 4", len(good.Tensors), len(good.ParamSteps))
	}
	mutate := func(f func(st *optim.State)) optim.State {
		js, _ := json.Marshal(good)
		var st optim.State
		if err := json.Unmarshal(js, &st); err != nil {
			t.Fatal(err)
		}
		f(&st)
		return st
	}
	cases := []struct {
		name string
		st   optim.State
		want string
	}{
		{"algorithm", mutate(func(st *optim.State) { st.Algorithm = "sgd" }),
			`optim: state is for "sgd"; this optimizer is adamw`},
		{"shape", mutate(func(st *optim.State) {
			x := st.Tensors["fc1.weight.exp_avg"]
			x.Shape = []int{6, 10}
			st.Tensors["fc1.weight.exp_avg"] = x
		}), "optim: state for fc1.weight has shape [6 10] but the parameter is [10 6]"},
		{"unknown tensor", mutate(func(st *optim.State) {
			st.Tensors["blocks.0.attn.qkv.weight.exp_avg"] = optim.StateTensor{Shape: []int{2}, Data: []float32{1, 2}}
		}), "optim: state for blocks.0.attn.qkv.weight: the optimizer has no parameter of that name"},
		{"unknown group member", mutate(func(st *optim.State) {
			st.Groups[0].Params = append(st.Groups[0].Params, "head.weight")
		}), "optim: state for head.weight: the optimizer has no parameter of that name"},
		{"buffer", mutate(func(st *optim.State) {
			st.Tensors["fc1.bias.momentum_buffer"] = st.Tensors["fc1.bias.exp_avg"]
		}), "adamw keeps exp_avg and exp_avg_sq, not momentum_buffer"},
		{"missing buffer", mutate(func(st *optim.State) { delete(st.Tensors, "fc2.bias.exp_avg_sq") }),
			"optim: state for fc2.bias lacks its exp_avg_sq"},
		{"length", mutate(func(st *optim.State) {
			x := st.Tensors["fc2.bias.exp_avg"]
			x.Data = x.Data[:1]
			st.Tensors["fc2.bias.exp_avg"] = x
		}), "holds 1 values for shape [3]"},
		{"no step count", mutate(func(st *optim.State) { delete(st.ParamSteps, "fc2.bias") }),
			"optim: state for fc2.bias has buffers but step count 0"},
		{"negative lr", mutate(func(st *optim.State) { st.Groups[0].LR = -1 }), "state group 0 LR = -1 is negative"},
		{"two groups", mutate(func(st *optim.State) {
			st.Groups = append(st.Groups, optim.GroupState{LR: 1, Params: []string{"fc1.bias"}})
		}), "optim: state puts fc1.bias in two groups"},
	}
	before := opt.StateBytes()
	exp := opt.Export
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := opt.Import(c.st)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Import: %v; want an error containing %q", err, c.want)
			}
			// A refused state changes nothing.
			if now, _ := exp(); !reflect.DeepEqual(now, good) || opt.StateBytes() != before {
				t.Fatal("a refused Import changed the optimizer")
			}
		})
	}
	if err := opt.Import(good); err != nil {
		t.Fatalf("Import of the good state: %v", err)
	}
	if got := category(dev, memory.OptimizerState); got != before {
		t.Errorf("%d state bytes after Import, want %d", got, before)
	}
	if got := category(dev, memory.Temporary); got != 0 {
		t.Errorf("%d temporary bytes after Export/Import", got)
	}

	// Export needs names.
	p := param(t, dev, "", p0)
	o2, err := optim.NewSGD([]*tensor.Tensor{p}, optim.SGD{LR: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o2.Export(); err == nil || !strings.Contains(err.Error(), "no name") {
		t.Errorf("Export of an unnamed parameter: %v", err)
	}
}
