package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/memfit/memfit/train"
)

var crashSeed = flag.Uint64("crash.seed", 0, "seed of TestSIGKILLDuringSaves's kill instants (0: from the clock)")

// TestSIGKILLDuringSaves kills the real binary with SIGKILL at random
// instants while it saves after every step, many times in a row, each run
// resuming from what the previous one left. After every kill the
// checkpoint must resume (or not exist yet, if no save had completed), and
// a run continued from the last one must end bitwise where an
// uninterrupted run does: a crash at any instant of a save leaves the
// previous complete checkpoint or the new one. A failure names the seed
// that reproduces its kill instants (-crash.seed), timing permitting.
func TestSIGKILLDuringSaves(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs the train binary")
	}
	const (
		kills = 60
		steps = "1000000" // the killed runs' length, never reached
		after = 25        // steps the last run trains past the last checkpoint
	)
	// Kills come at uniform instants up to maxDelay after the start,
	// which grows while no save has completed yet (a slow machine).
	maxDelay := 80 * time.Millisecond
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("kill instants from -crash.seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	dir := t.TempDir()
	bin := filepath.Join(dir, "train")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	args := []string{"-quiet", "-model", "gpt", "-layers", "1", "-width", "16", "-heads", "2", "-context", "8",
		"-batch", "4", "-dropout", "0.1", "-eval-every", "0", "-workers", "1",
		"-schedule", "const"} // so that the learning rate does not depend on -steps
	with := func(extra ...string) []string { return append(append([]string{}, args...), extra...) }

	ckpt := filepath.Join(dir, "x.st")
	last, midWrite := 0, 0
	for i := range kills {
		a := with("-steps", steps, "-save", ckpt, "-save-every", "1")
		if _, err := os.Stat(ckpt); err == nil {
			a = append(a, "-resume", ckpt)
		}
		cmd := exec.Command(bin, a...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(maxDelay))))
		cmd.Process.Kill() // SIGKILL
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("kill %d: the run ended before the kill (%v):\n%s", i, err, stderr.String())
		}
		// A temporary file left beside the checkpoint: the kill came
		// while a save was being written.
		tmps, _ := filepath.Glob(filepath.Join(dir, ".x.st*"))
		if len(tmps) > 0 {
			midWrite++
		}
		for _, p := range tmps {
			os.Remove(p)
		}
		step := 0
		if _, err := os.Stat(ckpt); err == nil {
			step = resumeCheck(t, i, with, ckpt)
		} // else killed before the first save completed
		if step < last {
			t.Fatalf("kill %d: checkpoint went back from step %d to %d", i, last, step)
		}
		if step == 0 {
			maxDelay = min(maxDelay*3/2, 2*time.Second)
		}
		last = step
	}
	t.Logf("%d kills up to %v after the start: %d during a save's write; the checkpoint reached step %d", kills, maxDelay, midWrite, last)
	if last == 0 {
		t.Fatalf("no kill came after a save: the test tested nothing")
	}

	end := strconv.Itoa(last + after)
	whole := filepath.Join(dir, "whole.st")
	if out, err := exec.Command(bin, with("-steps", end, "-save", whole)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, with("-steps", end, "-resume", ckpt, "-save", ckpt)...).CombinedOutput(); err != nil {
		t.Fatalf("finishing from the last checkpoint: %v\n%s", err, out)
	}
	sameTensors(t, whole, ckpt)
}

// resumeCheck resumes ckpt through the command (in this process) and
// returns its step: -steps one past the checkpoint's step builds, resumes
// and trains one step (a run with nothing left to train is refused), and
// saves nothing.
func resumeCheck(t *testing.T, kill int, with func(...string) []string, ckpt string) int {
	t.Helper()
	_, meta, err := train.ReadSafetensors(ckpt)
	if err != nil {
		t.Fatalf("kill %d: %v", kill, err)
	}
	step, err := strconv.Atoi(meta["step"])
	if err != nil {
		t.Fatalf("kill %d: checkpoint step %q", kill, meta["step"])
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), with("-steps", strconv.Itoa(step+1), "-resume", ckpt), io.Discard, &stderr); code != 0 {
		t.Fatalf("kill %d: resuming step %d: exit %d\n%s", kill, step, code, stderr.String())
	}
	return step
}

// sameTensors fails unless the safetensors files a and b hold the same
// tensors, bit for bit (weights and optimizer state).
func sameTensors(t *testing.T, a, b string) {
	t.Helper()
	ta, _, err := train.ReadSafetensors(a)
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := train.ReadSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ta) != len(tb) {
		t.Fatalf("%d tensors in %s, %d in %s", len(ta), a, len(tb), b)
	}
	for name, x := range ta {
		y, ok := tb[name]
		if !ok || len(y.Data) != len(x.Data) {
			t.Fatalf("%s: in %s, not the same in %s", name, a, b)
		}
		for i := range x.Data {
			if math.Float32bits(x.Data[i]) != math.Float32bits(y.Data[i]) {
				t.Fatalf("%s[%d]: %v in %s, %v in %s", name, i, x.Data[i], a, y.Data[i], b)
			}
		}
	}
}
