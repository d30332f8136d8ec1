package parallel_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/accumulate"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/models"
	"github.com/memfit/memfit/nn"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/parallel"
	"github.com/memfit/memfit/tensor"
)

// zeroRun trains the test MLP with ZeRO on c for steps [from, to), first
// importing state (if any), and returns the full optimizer state and the
// parameters at the end.
func zeroRun(c parallel.Comm, stage, from, to int, params0 []float32, state *optim.State) (optim.State, []float32, error) {
	dev := cpu.New(cpu.Threads(1))
	model, err := models.NewMLP(dev, models.MLPConfig{Widths: widths, Seed: 1})
	if err != nil {
		return optim.State{}, nil, err
	}
	defer nn.Release(model)
	params := model.Parameters()
	if params0 != nil {
		off := 0
		for _, p := range params {
			if err := p.SetFloat32s(params0[off : off+p.Len()]); err != nil {
				return optim.State{}, nil, err
			}
			off += p.Len()
		}
	}
	z, err := parallel.NewZeRO(c, params, parallel.ZeROConfig{Stage: stage, BucketBytes: 64}, newAdam)
	if err != nil {
		return optim.State{}, nil, err
	}
	defer z.Release()
	if state != nil {
		if err := z.ImportFull(*state); err != nil {
			return optim.State{}, nil, err
		}
	}
	per := globalRows / c.Size()
	for step := from; step < to; step++ {
		x, y, err := batch(dev, step, c.Rank()*per, (c.Rank()+1)*per)
		if err != nil {
			return optim.State{}, nil, err
		}
		_, err = accumulate.Window([]accumulate.Micro{{Inputs: x, Targets: y}}, func(s *tensor.Scope, mb accumulate.Micro) *tensor.Tensor {
			return s.CrossEntropy(model.Forward(nn.NewRun(s, 0), mb.Inputs), mb.Targets, tensor.CrossEntropyOptions{})
		}, nil)
		x.Release()
		y.Release()
		if err == nil {
			err = z.Step()
		}
		z.ZeroGrad()
		if err != nil {
			return optim.State{}, nil, err
		}
	}
	st, err := z.ExportFull()
	var out []float32
	for _, p := range params {
		out = append(out, p.Float32s()...)
	}
	return st, out, err
}

// TestZeROFullState: the state ExportFull gathers equals an unsharded
// optimizer's after the same steps, whatever the rank count, and a run
// resumed from it with another rank count (ImportFull) continues exactly
// as the unsharded one does.
func TestZeROFullState(t *testing.T) {
	// Reference: one rank, so the "shard" is everything.
	refMid, _, err := zeroRun(parallel.NewLocal(1)[0], 1, 0, 3, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	refEnd, refEndParams, err := zeroRun(parallel.NewLocal(1)[0], 1, 0, 6, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(refMid.Tensors) != 8 || refMid.ParamSteps["layers.0.weight"] != 3 {
		t.Fatalf("reference state: %d tensors, %v", len(refMid.Tensors), refMid.ParamSteps)
	}
	for _, tc := range []struct{ first, second, stage int }{{2, 3, 2}, {3, 2, 1}, {2, 1, 2}} {
		mids := make([]optim.State, tc.first)
		mp := make([][]float32, tc.first)
		checkErrs(t, runRanks(parallel.NewLocal(tc.first, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
			var err error
			mids[c.Rank()], mp[c.Rank()], err = zeroRun(c, tc.stage, 0, 3, nil, nil)
			return err
		}))
		for r, st := range mids {
			if st.Step != 3 || st.Algorithm != refMid.Algorithm || len(st.Tensors) != len(refMid.Tensors) || len(st.Groups) != 1 || len(st.Groups[0].Params) != 4 {
				t.Fatalf("%d ranks, rank %d: exported step %d, %s, %d tensors, groups %+v", tc.first, r, st.Step, st.Algorithm, len(st.Tensors), st.Groups)
			}
			if !maps.Equal(st.ParamSteps, refMid.ParamSteps) {
				t.Errorf("%d ranks, rank %d: param steps %v, want %v", tc.first, r, st.ParamSteps, refMid.ParamSteps)
			}
			for k, want := range refMid.Tensors {
				if e := relErr(st.Tensors[k].Data, want.Data); e > 1e-5 {
					t.Errorf("%d ranks, rank %d: %s differs from the unsharded state by %.2g", tc.first, r, k, e)
				}
			}
		}
		ends := make([][]float32, tc.second)
		endStates := make([]optim.State, tc.second)
		checkErrs(t, runRanks(parallel.NewLocal(tc.second, parallel.Timeout(30*time.Second)), func(c parallel.Comm) error {
			var err error
			endStates[c.Rank()], ends[c.Rank()], err = zeroRun(c, tc.stage, 3, 6, mp[0], &mids[0])
			return err
		}))
		for r := range ends {
			if e := relErr(ends[r], refEndParams); e > 1e-5 {
				t.Errorf("%d ranks resumed on %d, rank %d: parameters differ from an uninterrupted run by %.2g", tc.first, tc.second, r, e)
			}
			if e := relErr(endStates[r].Tensors["layers.1.weight.exp_avg_sq"].Data, refEnd.Tensors["layers.1.weight.exp_avg_sq"].Data); e > 1e-5 {
				t.Errorf("resumed state differs by %.2g", e)
			}
		}
	}
}

// TestZeROImportRejects: a state for other parameters or shapes is an
// error naming the tensor, and leaves nothing half-imported.
func TestZeROImportRejects(t *testing.T) {
	good, _, err := zeroRun(parallel.NewLocal(1)[0], 1, 0, 1, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(st *optim.State){
		"no such parameter": func(st *optim.State) {
			st.Tensors["head.weight.exp_avg"] = st.Tensors["layers.0.weight.exp_avg"]
		},
		"holds 3 values": func(st *optim.State) {
			st.Tensors["layers.0.bias.exp_avg"] = optim.StateTensor{Shape: []int{3}, Data: make([]float32, 3)}
		},
		"not <parameter>": func(st *optim.State) {
			st.Tensors["layers.0.bias.momentum_buffer"] = st.Tensors["layers.0.bias.exp_avg"]
		},
	} {
		st := good
		st.Tensors = map[string]optim.StateTensor{}
		for k, v := range good.Tensors {
			st.Tensors[k] = v
		}
		mutate(&st)
		_, _, err := zeroRun(parallel.NewLocal(1)[0], 1, 0, 0, nil, &st)
		if err == nil || !contains(err.Error(), name) {
			t.Errorf("%s: error %v", name, err)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
