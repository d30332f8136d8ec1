package train

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/optim"
)

// A saved state is two safetensors files written atomically: PATH holds
// the weights, named by their dotted parameter paths (readable by any
// safetensors tool), and PATH.state holds the optimizer's tensors with the
// rest of the trainer's state (step, loader position, scaler, optimizer
// groups, the micro-batch count, the configuration) as JSON metadata. The
// state file is written first; both carry the step, and Resume refuses a
// pair that disagrees, so a crash between the two writes is detected
// rather than resumed from mixed states.

const formatVersion = "memfit/1"

// modelKey identifies the architecture a checkpoint belongs to.
func modelKey(c Config) string {
	switch c.Model {
	case "gpt":
		return fmt.Sprintf("gpt layers=%d width=%d heads=%d context=%d", c.Layers, c.Width, c.Heads, c.Context)
	case "cnn":
		return fmt.Sprintf("cnn width=%d", c.Width)
	}
	return fmt.Sprintf("mlp layers=%d width=%d", c.Layers, c.Width)
}

type trainerState struct {
	Step      int              `json:"step"`
	Accum     int              `json:"accum"`
	Position  data.Position    `json:"position"`
	Scaler    *amp.ScalerState `json:"scaler,omitempty"`
	Optimizer optim.State      `json:"optimizer"` // without tensors
	Model     string           `json:"model"`
	Config    Config           `json:"config"`
	Samples   int64            `json:"samples"`
	Unfrozen  map[string]bool  `json:"unfrozen,omitempty"`
	// GlobalBatch is the examples per step over all ranks when saved
	// (absent in one-process checkpoints: Config.Batch). Position counts
	// global batches, so a run resumed with another rank count converts.
	GlobalBatch int `json:"global_batch,omitempty"`
}

// Save writes the trainer's state to path and path+".state". With -dist
// every rank must call it (under ZeRO the optimizer's shards are gathered
// first); rank 0 writes.
func (t *Trainer) Save(path string) error {
	ost, err := t.exportOptimizer()
	if err != nil {
		return fmt.Errorf("save %s: %v", path, err)
	}
	if t.rank != 0 {
		return nil
	}
	tensors := make(map[string]Tensor, len(ost.Tensors))
	for k, v := range ost.Tensors {
		tensors[k] = Tensor(v)
	}
	ost.Tensors = nil
	st := trainerState{Step: t.step, Accum: t.accum, Position: t.train.Position(), Optimizer: ost, Model: modelKey(t.Config), Config: t.Config, Samples: t.samples}
	if t.ranks > 1 {
		st.GlobalBatch = t.globalBatch()
	}
	if t.Scaler != nil {
		s := t.Scaler.State()
		st.Scaler = &s
	}
	meta, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := WriteSafetensors(path+".state", tensors, map[string]string{"format": formatVersion, "trainer": string(meta)}); err != nil {
		return fmt.Errorf("save %s.state: %v", path, err)
	}
	weights := map[string]Tensor{}
	for _, p := range t.Model.Parameters() {
		weights[p.Name()] = Tensor{Shape: append([]int{}, p.Shape()...), Data: p.Float32s()}
	}
	wmeta := map[string]string{"format": formatVersion, "model": modelKey(t.Config), "step": strconv.Itoa(t.step)}
	if err := WriteSafetensors(path, weights, wmeta); err != nil {
		return fmt.Errorf("save %s: %v", path, err)
	}
	t.logf("step %d: saved %s", t.step, path)
	return nil
}

// Resume restores a state written by Save into this trainer, whose model,
// optimizer and data must have been built from a compatible Config.
func (t *Trainer) Resume(path string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("-resume %s: "+format, append([]any{path}, args...)...)
	}
	if _, err := os.Stat(path); err != nil {
		return bad("%v", err)
	}
	weights, wmeta, err := ReadSafetensors(path)
	if err != nil {
		return bad("%v", err)
	}
	if wmeta["format"] != formatVersion {
		return bad("not a memfit checkpoint (format %q)", wmeta["format"])
	}
	if want := modelKey(t.Config); wmeta["model"] != want {
		return bad("checkpoint is for %q, this run builds %q", wmeta["model"], want)
	}
	otensors, smeta, err := ReadSafetensors(path + ".state")
	if err != nil {
		return bad("%v", err)
	}
	var st trainerState
	if err := json.Unmarshal([]byte(smeta["trainer"]), &st); err != nil {
		return bad("%s.state: trainer metadata: %v", path, err)
	}
	if strconv.Itoa(st.Step) != wmeta["step"] {
		return bad("weights are from step %s but %s.state from step %d (an interrupted save?)", wmeta["step"], path, st.Step)
	}
	params := t.Model.Parameters()
	names := map[string]bool{}
	for _, p := range params {
		names[p.Name()] = true
		w, ok := weights[p.Name()]
		if !ok {
			return bad("no weights for parameter %s", p.Name())
		}
		if !slices.Equal(w.Shape, p.Shape()) {
			return bad("parameter %s is %v in the checkpoint but %v in this model", p.Name(), w.Shape, p.Shape())
		}
	}
	var extra []string
	for n := range weights {
		if !names[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return bad("checkpoint has weights this model lacks: %v", extra)
	}
	// Checked: now change state.
	for _, p := range params {
		if err := p.SetFloat32s(weights[p.Name()].Data); err != nil {
			return bad("%v", err)
		}
	}
	// Parameters unfrozen before the save train again.
	if t.Config.UnfreezeAt > 0 && st.Step >= t.Config.UnfreezeAt {
		for _, p := range t.unfreeze {
			p.SetRequiresGrad(true)
		}
	}
	st.Optimizer.Tensors = map[string]optim.StateTensor{}
	for k, v := range otensors {
		st.Optimizer.Tensors[k] = optim.StateTensor(v)
	}
	pos, err := convertPosition(st, t.globalBatch())
	if err != nil {
		return bad("%v", err)
	}
	if err := t.importOptimizer(st.Optimizer); err != nil {
		return bad("%v", err)
	}
	if t.Scaler != nil && st.Scaler != nil {
		if err := t.Scaler.SetState(*st.Scaler); err != nil {
			return bad("%v", err)
		}
	}
	if err := t.train.Seek(pos); err != nil {
		return bad("%v", err)
	}
	t.step, t.accum, t.samples = st.Step, max(st.Accum, 1), st.Samples
	t.logf("resumed from %s at step %d", path, t.step)
	return nil
}

// convertPosition maps a saved loader position, in global batches of the
// saved run, to global batches of this one: the epoch's example order does
// not depend on the rank count, so resuming at the same example is exact
// when it starts a global batch here.
func convertPosition(st trainerState, global int) (data.Position, error) {
	saved := st.GlobalBatch
	if saved == 0 {
		saved = st.Config.Batch
	}
	p := st.Position
	if saved == global || saved <= 0 {
		return p, nil
	}
	done := p.Batch * saved
	if done%global != 0 {
		return p, fmt.Errorf("saved after %d examples of epoch %d (global batch %d); that is not a whole number of global batches of %d here (choose -batch × ranks dividing %d)", done, p.Epoch, saved, global, done)
	}
	return data.Position{Epoch: p.Epoch, Batch: done / global}, nil
}
