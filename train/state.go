package train

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/memfit/memfit/amp"
	"github.com/memfit/memfit/data"
	"github.com/memfit/memfit/hf"
	"github.com/memfit/memfit/optim"
	"github.com/memfit/memfit/tensor"
)

// A checkpoint is one safetensors file, written atomically (temporary
// file, fsync, rename, fsync of the directory): the rename is the commit
// point, so a crash at any instant leaves either the previous complete
// checkpoint or the new one. It holds
//
//   - the weights, F32 under their dotted parameter paths, so any
//     safetensors tool reads them by name;
//   - the optimizer's tensors under OptimizerPrefix, which no dotted
//     parameter path starts with;
//   - in __metadata__: format (memfit/2), model, step, run (the run id),
//     trainer (the rest of the trainer's state as JSON: step, run id,
//     loader position, scaler, optimizer groups, micro-batch count,
//     configuration) and crc32c, a JSON object giving, for every tensor
//     and for the trainer JSON (under "__trainer__"), the CRC-32C of the
//     run id followed by its bytes.
//
// Resume verifies every checksum and that metadata and trainer state agree
// on step, run and model, so a flipped bit, or a tensor or state section
// spliced in from another run's checkpoint (whose checksums were computed
// with another run id), is an error naming the file and the tensor rather
// than a run trained on damage.
//
// Format memfit/1 kept the weights in PATH and the rest in PATH.state,
// renamed one after the other. Resume still reads such pairs and refuses
// one whose steps disagree; a memfit/2 save removes a memfit/1 PATH.state
// beside it, which would otherwise look like part of the new checkpoint.

const (
	formatVersion = "memfit/2"
	legacyFormat  = "memfit/1"

	// OptimizerPrefix starts the names of a checkpoint's optimizer
	// tensors (OptimizerPrefix + "blocks.0.mlp.fc.weight.m"); tensors
	// without it are the weights.
	OptimizerPrefix = "__optimizer__/"

	// trainerKey names the trainer JSON's checksum in the crc32c map.
	trainerKey = "__trainer__"
)

// modelKey identifies the architecture a checkpoint belongs to: the
// model's Kind names it (models.Kind.Key).
func modelKey(c Config) string {
	if k, ok := c.kind(); ok && k.Key != nil {
		return k.Key(c.modelSpec())
	}
	return fmt.Sprintf("%s layers=%d width=%d", c.Model.Name, c.Model.Layers, c.Model.Width)
}

type trainerState struct {
	Step      int              `json:"step"`
	Run       string           `json:"run,omitempty"` // absent in memfit/1
	Accum     int              `json:"accum"`
	Position  data.Position    `json:"position"`
	Scaler    *amp.ScalerState `json:"scaler,omitempty"`
	Optimizer optim.State      `json:"optimizer"` // without tensors
	Model     string           `json:"model"`
	Config    Config           `json:"config"`
	Samples   int64            `json:"samples"`
	Unfrozen  map[string]bool  `json:"unfrozen,omitempty"`
	// LoRABase names the base a LoRA run's adapters apply to (loraBase)
	// and LoRASum is its fingerprint (baseFingerprint); both are empty in
	// the checkpoint of a whole model.
	LoRABase string `json:"lora_base,omitempty"`
	LoRASum  string `json:"lora_base_crc32c,omitempty"`
	// GlobalBatch is the examples per step over all ranks when saved
	// (absent in one-process checkpoints: Config.Batch). Position counts
	// global batches, so a run resumed with another rank count converts.
	GlobalBatch int `json:"global_batch,omitempty"`
}

// newRunID returns a random id for a run that starts fresh.
func newRunID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b[:])
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum is the CRC-32C of run followed by the values' little-endian
// bytes, in 8 hex digits. Starting from the run id binds a checksum to its
// run: a tensor copied together with its checksum from another run's
// checkpoint does not pass as this run's.
func checksum(run string, data []float32) string {
	return fmt.Sprintf("%08x", updateFloat32s(crc32.Update(0, castagnoli, []byte(run)), data))
}

// updateFloat32s continues the CRC-32C c over the values' little-endian
// bytes, a block at a time.
func updateFloat32s(c uint32, data []float32) uint32 {
	var buf [4096]byte
	for len(data) > 0 {
		n := min(len(data), len(buf)/4)
		for i, v := range data[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
		}
		c = crc32.Update(c, castagnoli, buf[:4*n])
		data = data[n:]
	}
	return c
}

// checksumBytes is checksum for bytes (the trainer JSON).
func checksumBytes(run string, b []byte) string {
	return fmt.Sprintf("%08x", crc32.Update(crc32.Update(0, castagnoli, []byte(run)), castagnoli, b))
}

// Save writes the trainer's state to path as one checkpoint file (see
// above). With -dist every rank must call it (under ZeRO the optimizer's
// shards are gathered first); rank 0 writes.
func (t *Trainer) Save(path string) error {
	if name := t.notFinite(); name != "" {
		// A run whose state went bad keeps the last good save rather
		// than overwrite it with what it would resume or export.
		return fmt.Errorf("save %s: %s holds values that are not finite: not saved (a save already there is kept; lower -lr, or -clip)", path, name)
	}
	wh, sharded := partAs[weightHolder](t)
	if sharded && t.Config.Output.SaveFormat == "hf" {
		// hf.Save reads the model's parameters: all of them are gathered
		// on every rank while rank 0 writes.
		return wh.gatherAll(func() error { return t.save(path, nil) })
	}
	var weights map[string][]float32
	if sharded {
		// Block by block: every rank gathers one group at a time and
		// rank 0 copies it to the host, so the device never holds more
		// than the shards and one group whole.
		weights = map[string][]float32{}
		err := wh.gatherEach(func(params []*tensor.Tensor) error {
			if t.rank == 0 {
				for _, p := range params {
					weights[p.Name()] = p.Float32s()
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("save %s: %v", path, err)
		}
	}
	return t.save(path, weights)
}

// save writes the checkpoint; weights, when not nil, holds the
// parameters' values (gathered from ZeRO-3's shards), else they are read
// from the model.
func (t *Trainer) save(path string, weights map[string][]float32) error {
	if t.Config.Output.SaveFormat == "hf" {
		if t.rank != 0 {
			return nil
		}
		c := t.Config
		o := hf.SaveOptions{Tokenizer: c.Data.Tokenizer, From: c.Model.Init, Adapters: c.Output.SavePEFT}
		if err := hf.SaveWith(t.Model, path, o); err != nil {
			return fmt.Errorf("save %s: %v", path, err)
		}
		return nil
	}
	ost, err := t.upd.exportState(t)
	if err != nil {
		return fmt.Errorf("save %s: %v", path, err)
	}
	if t.rank != 0 {
		return nil
	}
	params := t.checkpointParams()
	tensors := make(map[string]Tensor, len(params)+len(ost.Tensors))
	for _, p := range params {
		data, ok := weights[p.Name()]
		if !ok {
			data = p.Float32s()
		}
		tensors[p.Name()] = Tensor{Shape: append([]int{}, p.Shape()...), Data: data}
	}
	for k, v := range ost.Tensors {
		tensors[OptimizerPrefix+k] = Tensor(v)
	}
	ost.Tensors = nil
	st := trainerState{Step: t.step, Run: t.runID, Accum: t.accum, Position: t.train.Position(), Optimizer: ost, Model: modelKey(t.Config), Config: t.Config, Samples: t.samples}
	if t.ranks > 1 {
		st.GlobalBatch = t.globalBatch()
	}
	meta := map[string]string{}
	each(t, func(h checkpointer) error { h.saveState(t, &st, meta); return nil })
	if t.Scaler != nil {
		s := t.Scaler.State()
		st.Scaler = &s
	}
	trainer, err := json.Marshal(st)
	if err != nil {
		return err
	}
	sums := make(map[string]string, len(tensors)+1)
	for n, v := range tensors {
		sums[n] = checksum(t.runID, v.Data)
	}
	sums[trainerKey] = checksumBytes(t.runID, trainer)
	sj, err := json.Marshal(sums)
	if err != nil {
		return err
	}
	meta["format"], meta["model"], meta["step"] = formatVersion, modelKey(t.Config), strconv.Itoa(t.step)
	meta["run"], meta["trainer"], meta["crc32c"] = t.runID, string(trainer), string(sj)
	if err := WriteSafetensors(path, tensors, meta); err != nil {
		return fmt.Errorf("save %s: %v", path, err)
	}
	t.removeLegacyState(path)
	t.logf("step %d: saved %s", t.step, path)
	return nil
}

// checkpointParams are the parameters a checkpoint holds: every one, or
// what a technique says (-lora: the adapters only).
func (t *Trainer) checkpointParams() []*tensor.Tensor {
	if cp, ok := partAs[checkpointer](t); ok {
		return cp.savedParams(t)
	}
	return t.Model.Parameters()
}

// checkResume lets the techniques refuse a checkpoint that is not this
// run's kind (adapters for another base, a whole model into a LoRA run);
// a run without such a technique refuses adapters.
func (t *Trainer) checkResume(st trainerState) error {
	if cp, ok := partAs[checkpointer](t); ok {
		return cp.checkResume(t, st)
	}
	return checkNotAdapters(st)
}

// removeLegacyState removes path+".state" if it is a memfit/1 state file,
// which the checkpoint now at path does not use. Anything else of that
// name is left alone.
func (t *Trainer) removeLegacyState(path string) {
	sp := path + ".state"
	if what, err := notRegular(sp); err != nil || what != "" {
		return
	}
	if _, meta, err := ReadSafetensors(sp); err != nil || meta["format"] != legacyFormat {
		return
	}
	if err := os.Remove(sp); err != nil {
		t.logf("%s: a memfit/1 state file no longer used: %v", sp, err)
		return
	}
	t.logf("removed %s (memfit/1; %s now holds the whole checkpoint)", sp, path)
}

// Resume restores a state written by Save into this trainer, whose model,
// optimizer and data must have been built from a compatible Config. It
// changes nothing unless the whole checkpoint checks out.
func (t *Trainer) Resume(path string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("-resume %s: "+format, append([]any{path}, args...)...)
	}
	// Stat before opening: opening a FIFO would block.
	if what, err := notRegular(path); err != nil {
		return bad("%v", err)
	} else if what != "" {
		return bad("is %s, not a checkpoint file", what)
	}
	tensors, meta, err := ReadSafetensors(path)
	if err != nil {
		return bad("%v", err)
	}
	var (
		weights  map[string]Tensor
		otensors map[string]Tensor
		st       trainerState
	)
	switch meta["format"] {
	case formatVersion:
		weights, otensors, st, err = verify(tensors, meta)
	case legacyFormat:
		weights = tensors
		otensors, st, err = readLegacyState(path, meta)
	default:
		return bad("not a memfit checkpoint (format %q)", meta["format"])
	}
	if err != nil {
		return bad("%v", err)
	}
	if want := modelKey(t.Config); meta["model"] != want {
		return bad("checkpoint is for %q, this run builds %q", meta["model"], want)
	}
	if err := t.checkResume(st); err != nil {
		return bad("%v", err)
	}
	params := t.checkpointParams()
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
	pos, err := convertPosition(st, t.globalBatch())
	if err != nil && t.Config.Generate.Tokens == 0 {
		// Generation reads no data: the batch it was trained with does
		// not matter.
		return bad("%v", err)
	}
	// Checked: now change state.
	if err := each(t, func(h loadHook) error { return h.beforeLoad(t, st) }); err != nil {
		return bad("%v", err)
	}
	if wh, ok := partAs[weightHolder](t); ok {
		// Each rank keeps its shards of the checkpoint's weights.
		// A parameter the checkpoint lacks is LoRA's base: it stays.
		if err := wh.loadFull(func(p *tensor.Tensor) []float32 { return weights[p.Name()].Data }); err != nil {
			return bad("%v", err)
		}
	} else {
		for _, p := range params {
			if err := p.SetFloat32s(weights[p.Name()].Data); err != nil {
				return bad("%v", err)
			}
		}
	}
	noteWeightDType(t, st)
	if err := each(t, func(h loadHook) error { return h.afterLoad(t, st) }); err != nil {
		return bad("%v", err)
	}
	st.Optimizer.Tensors = map[string]optim.StateTensor{}
	for k, v := range otensors {
		st.Optimizer.Tensors[k] = optim.StateTensor(v)
	}
	if err := t.upd.importState(t, st.Optimizer); err != nil {
		return bad("%v", err)
	}
	if t.Scaler != nil && st.Scaler != nil {
		if err := t.Scaler.SetState(*st.Scaler); err != nil {
			return bad("%v", err)
		}
	}
	if t.Config.Generate.Tokens == 0 {
		if err := t.train.Seek(pos); err != nil {
			return bad("%v", err)
		}
	}
	t.step, t.accum, t.samples = st.Step, max(st.Accum, 1), st.Samples
	if st.Run != "" { // a memfit/1 checkpoint keeps this run's fresh id
		t.runID = st.Run
	}
	t.logf("resumed from %s at step %d", path, t.step)
	return nil
}

// verify checks a memfit/2 checkpoint's checksums and the agreement of its
// metadata with its trainer state, and splits its tensors into weights and
// optimizer tensors (without the prefix).
func verify(tensors map[string]Tensor, meta map[string]string) (weights, opt map[string]Tensor, st trainerState, err error) {
	run := meta["run"]
	if run == "" {
		return nil, nil, st, fmt.Errorf("metadata has no run id")
	}
	var sums map[string]string
	if err := json.Unmarshal([]byte(meta["crc32c"]), &sums); err != nil {
		return nil, nil, st, fmt.Errorf("metadata crc32c: %v", err)
	}
	const why = "the file is damaged, or was spliced from another run's checkpoint"
	if want, ok := sums[trainerKey]; !ok {
		return nil, nil, st, fmt.Errorf("trainer state has no checksum in the metadata (%s)", why)
	} else if got := checksumBytes(run, []byte(meta["trainer"])); got != want {
		return nil, nil, st, fmt.Errorf("trainer state: CRC-32C %s, but the metadata records %s (%s)", got, want, why)
	}
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names) // the first bad tensor by name, whatever map order
	for _, n := range names {
		want, ok := sums[n]
		if !ok {
			return nil, nil, st, fmt.Errorf("tensor %s has no checksum in the metadata (%s)", n, why)
		}
		if got := checksum(run, tensors[n].Data); got != want {
			return nil, nil, st, fmt.Errorf("tensor %s: CRC-32C %s, but the metadata records %s (%s)", n, got, want, why)
		}
	}
	for n := range sums {
		if _, ok := tensors[n]; !ok && n != trainerKey {
			return nil, nil, st, fmt.Errorf("the metadata has a checksum for tensor %s, which the file lacks", n)
		}
	}
	if err := json.Unmarshal([]byte(meta["trainer"]), &st); err != nil {
		return nil, nil, st, fmt.Errorf("trainer metadata: %v", err)
	}
	switch {
	case st.Run != run:
		return nil, nil, st, fmt.Errorf("trainer state is from run %s, the file's metadata from run %s (%s)", st.Run, run, why)
	case strconv.Itoa(st.Step) != meta["step"]:
		return nil, nil, st, fmt.Errorf("trainer state is from step %d, the file's metadata from step %s (%s)", st.Step, meta["step"], why)
	case st.Model != meta["model"]:
		return nil, nil, st, fmt.Errorf("trainer state is for %s, the file's metadata for %s (%s)", quoteShort(st.Model), quoteShort(meta["model"]), why)
	}
	weights, opt = map[string]Tensor{}, map[string]Tensor{}
	for n, v := range tensors {
		if k, ok := strings.CutPrefix(n, OptimizerPrefix); ok {
			opt[k] = v
		} else {
			weights[n] = v
		}
	}
	return weights, opt, st, nil
}

// readLegacyState reads the PATH.state file of a memfit/1 checkpoint whose
// weights file at path has metadata wmeta, refusing a pair whose steps
// disagree (a crash between the two renames of a memfit/1 save).
func readLegacyState(path string, wmeta map[string]string) (map[string]Tensor, trainerState, error) {
	var st trainerState
	otensors, smeta, err := ReadSafetensors(path + ".state")
	if err != nil {
		return nil, st, err
	}
	if smeta["format"] != legacyFormat {
		return nil, st, fmt.Errorf("%s.state: not a memfit/1 state file (format %s)", path, quoteShort(smeta["format"]))
	}
	if err := json.Unmarshal([]byte(smeta["trainer"]), &st); err != nil {
		return nil, st, fmt.Errorf("%s.state: trainer metadata: %v", path, err)
	}
	if strconv.Itoa(st.Step) != wmeta["step"] {
		return nil, st, fmt.Errorf("weights are from step %s but %s.state from step %d (an interrupted save?)", wmeta["step"], path, st.Step)
	}
	return otensors, st, nil
}

// convertPosition maps a saved loader position, in global batches of the
// saved run, to global batches of this one: the epoch's example order does
// not depend on the rank count, so resuming at the same example is exact
// when it starts a global batch here.
func convertPosition(st trainerState, global int) (data.Position, error) {
	saved := st.GlobalBatch
	if saved == 0 {
		saved = st.Config.Optim.Batch
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

// notFinite names the first of the run's parameters (those on this rank
// that are resident) that holds an inf or a NaN, or returns "". Quantized
// weights are checked as their dequantized values.
func (t *Trainer) notFinite() string {
	for _, p := range t.Model.Parameters() {
		if p.Evicted() {
			continue
		}
		ok := true
		if err := tensor.Catch(func() error { ok = p.AllFinite(); return nil }); err == nil && !ok {
			return "parameter " + p.Name()
		}
	}
	return ""
}
