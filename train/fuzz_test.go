package train

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/memfit/memfit/safetensors"
)

// fuzzCheckpoint is a small memfit/2 checkpoint as Save writes it: a
// weight, an optimizer tensor, and metadata whose checksums agree.
func fuzzCheckpoint(f *testing.F) []byte {
	const run = "0123456789abcdef"
	tensors := map[string]Tensor{
		"w":                     {Shape: []int{2, 2}, Data: []float32{1, -2, 3.5, 0}},
		OptimizerPrefix + "w.m": {Shape: []int{2, 2}, Data: []float32{0.1, 0, 0, -0.25}},
	}
	st := trainerState{Step: 3, Run: run, Model: "fuzz"}
	trainer, err := json.Marshal(st)
	if err != nil {
		f.Fatal(err)
	}
	sums := map[string]string{trainerKey: checksumBytes(run, trainer)}
	for n, v := range tensors {
		sums[n] = checksum(run, v.Data)
	}
	sj, _ := json.Marshal(sums)
	meta := map[string]string{"format": formatVersion, "model": "fuzz", "step": strconv.Itoa(st.Step), "run": run,
		"trainer": string(trainer), "crc32c": string(sj)}
	var srcs []safetensors.Source
	for n, v := range tensors {
		var b bytes.Buffer
		safetensors.WriteFloat32s(&b, v.Data)
		srcs = append(srcs, safetensors.Source{Name: n, DType: safetensors.F32, Shape: v.Shape, Data: b.Bytes()})
	}
	var buf bytes.Buffer
	if err := safetensors.Write(&buf, meta, srcs); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzReadCheckpoint feeds arbitrary files to the checkpoint reader and
// the checks Resume makes before it changes anything (ReadSafetensors,
// then verify's checksums and metadata): each either refuses the file or
// accepts one whose every tensor holds its shape's values and lands in
// the weights or the optimizer's state. Seeds: a valid checkpoint (below)
// and testdata/fuzz/FuzzReadCheckpoint.
func FuzzReadCheckpoint(f *testing.F) {
	valid := fuzzCheckpoint(f)
	path := filepath.Join(f.TempDir(), "fuzz.safetensors")
	if err := os.WriteFile(path, valid, 0o644); err != nil {
		f.Fatal(err)
	}
	if tensors, meta, err := ReadSafetensors(path); err != nil {
		f.Fatal(err)
	} else if _, _, _, err := verify(tensors, meta); err != nil {
		f.Fatalf("the valid seed: %v", err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tensors, meta, err := ReadSafetensors(path)
		if err != nil {
			return
		}
		for n, v := range tensors {
			if numel(v.Shape) != len(v.Data) {
				t.Fatalf("tensor %s: shape %v with %d values", n, v.Shape, len(v.Data))
			}
		}
		weights, opt, st, err := verify(tensors, meta)
		if err != nil {
			return
		}
		if len(weights)+len(opt) != len(tensors) || st.Run != meta["run"] || strconv.Itoa(st.Step) != meta["step"] {
			t.Fatalf("accepted: %d weights and %d optimizer tensors of %d, run %q of %q, step %d of %q",
				len(weights), len(opt), len(tensors), st.Run, meta["run"], st.Step, meta["step"])
		}
	})
}
