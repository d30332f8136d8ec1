package main

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/memfit/memfit/train"
)

// TestSIGINTSavesAndResumes runs the real binary, interrupts it with
// SIGINT mid-run, resumes from the state it saved, and checks that the
// final weights are bitwise those of an uninterrupted run.
func TestSIGINTSavesAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs the train binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "train")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	args := []string{"-quiet", "-model", "gpt", "-layers", "2", "-width", "32", "-heads", "4", "-context", "16",
		"-batch", "8", "-dropout", "0.1", "-steps", "300", "-eval-every", "0", "-workers", "2"}

	whole := filepath.Join(dir, "whole.safetensors")
	if out, err := exec.Command(bin, append(args, "-save", whole)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}

	state := filepath.Join(dir, "state.safetensors")
	metrics := filepath.Join(dir, "m.jsonl")
	cmd := exec.Command(bin, append(args, "-save", state, "-metrics", metrics)...)
	var stderr jobOutput
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFor(t, "20 steps", &stderr, func() bool {
		b, _ := os.ReadFile(metrics)
		return bytes.Count(b, []byte("\n")) >= 20
	})
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("interrupted run ended with %v, want exit status 130; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "state saved to "+state) {
		t.Errorf("stderr does not say where the state is:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "step 300") {
		t.Fatalf("the run finished before the signal: %s", stderr.String())
	}

	final := filepath.Join(dir, "final.safetensors")
	if out, err := exec.Command(bin, append(args, "-resume", state, "-save", final)...).CombinedOutput(); err != nil {
		t.Fatalf("resumed run: %v\n%s", err, out)
	}
	want, _, err := train.ReadSafetensors(whole)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := train.ReadSafetensors(final)
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		g := got[name]
		for i := range w.Data {
			if math.Float32bits(w.Data[i]) != math.Float32bits(g.Data[i]) {
				t.Fatalf("%s[%d]: %v after interrupt+resume, %v uninterrupted", name, i, g.Data[i], w.Data[i])
			}
		}
	}
}
