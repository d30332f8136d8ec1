package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/memfit/memfit/train"
)

// The tests below run `train -dist mpi` under mpirun with 2 ranks (issue
// 12's acceptance, run by CI, which installs Open MPI). They skip where
// mpirun or the MPI development files are missing.

var mpiBuild struct {
	once sync.Once
	bin  string
	err  error
}

// mpiBinary builds the train command with -tags mpi once per test binary.
func mpiBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds an MPI binary and runs mpirun")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev)")
	}
	mpiBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "memfit-mpi")
		if err != nil {
			mpiBuild.err = err
			return
		}
		mpiBuild.bin = filepath.Join(dir, "train")
		out, err := exec.Command("go", "build", "-tags", "mpi", "-o", mpiBuild.bin, ".").CombinedOutput()
		if err != nil {
			mpiBuild.err = fmt.Errorf("go build -tags mpi: %v\n%s", err, out)
		}
	})
	if mpiBuild.err != nil {
		if _, err := exec.LookPath("mpicc"); err != nil {
			t.Skipf("no MPI development files (apt-get install libopenmpi-dev): %v", mpiBuild.err)
		}
		t.Fatal(mpiBuild.err) // MPI is installed: the build must work
	}
	return mpiBuild.bin
}

// mpirun runs bin on n ranks; --oversubscribe since CI may have fewer
// cores than ranks, --allow-run-as-root since CI runs as root.
func mpirun(ctx context.Context, n int, bin string, args ...string) *exec.Cmd {
	a := []string{"--oversubscribe", "-np", strconv.Itoa(n)}
	if os.Geteuid() == 0 {
		a = append([]string{"--allow-run-as-root"}, a...)
	}
	cmd := exec.CommandContext(ctx, "mpirun", append(append(a, bin), args...)...)
	cmd.Env = append(os.Environ(), "OMPI_MCA_btl=self,vader,tcp", "OMPI_MCA_rmaps_base_oversubscribe=1")
	return cmd
}

func readWeights(t *testing.T, path string) map[string]train.Tensor {
	t.Helper()
	w, _, err := train.ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	for name := range w {
		if strings.HasPrefix(name, train.OptimizerPrefix) {
			delete(w, name) // the weights only
		}
	}
	return w
}

func maxRelDiff(a, b map[string]train.Tensor) float64 {
	var num, den float64
	for name, w := range b {
		for i, v := range w.Data {
			d := float64(a[name].Data[i]) - float64(v)
			num += d * d
			den += float64(v) * float64(v)
		}
	}
	return math.Sqrt(num / den)
}

var small = []string{"-quiet", "-model", "gpt", "-layers", "2", "-width", "32", "-heads", "4", "-context", "16",
	"-eval-every", "0", "-workers", "1", "-steps", "20"}

// TestMPIMatchesOneProcess: 2 ranks of -batch 4 under mpirun end where one
// process of -batch 8 ends, with -zero 0, 1, 2 and 3: the GPT in f32, the MLP
// in bf16 (Adam, 1e-5), and the GPT in bf16 with accumulation (SGD, 1e-4;
// see train's TestDistEquivalence). 16-bit cases compare with one process
// taking the same micro-batches.
func TestMPIMatchesOneProcess(t *testing.T) {
	bin := mpiBinary(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		extra    []string
		oneAccum string
		tol      float64
	}{
		{"f32", nil, "1", 1e-5},
		{"mlp bf16", []string{"-model", "mlp", "-layers", "2", "-width", "64", "-amp", "bf16"}, "2", 1e-5},
		// SGD and 1e-4: see train's TestDistEquivalence on 16-bit runs.
		{"bf16 accum 2", []string{"-amp", "bf16", "-accum", "2", "-optim", "sgd", "-lr", "0.05"}, "4", 1e-4},
	} {
		one := filepath.Join(dir, "one.safetensors")
		args := append(append(append([]string{}, small...), tc.extra...), "-batch", "8", "-save", one)
		if tc.oneAccum != "1" {
			args = append(args, "-accum", tc.oneAccum) // the later -accum wins
		}
		var stderr bytes.Buffer
		if code := run(context.Background(), args, io.Discard, &stderr); code != 0 {
			t.Fatalf("%s, one process: exit %d\n%s", tc.name, code, stderr.String())
		}
		want := readWeights(t, one)
		for _, zero := range []string{"0", "1", "2", "3"} {
			path := filepath.Join(dir, "two-"+zero+".safetensors")
			args := append(append(append([]string{}, small...), tc.extra...), "-batch", "4", "-dist", "mpi", "-zero", zero, "-save", path)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			out, err := mpirun(ctx, 2, bin, args...).CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("%s -zero %s: %v\n%s", tc.name, zero, err, out)
			}
			if d := maxRelDiff(readWeights(t, path), want); d > tc.tol {
				t.Errorf("%s -zero %s: 2 ranks × 4 differ from 1 × 8 by %.2g > %.2g", tc.name, zero, d, tc.tol)
			}
		}
	}
}

// TestMPIZero3FourRanks: issue 25's equivalence under mpirun with 4 ranks:
// 4 ranks of -batch 2 with -zero 3 end where one process of -batch 8 ends
// (f32, 20 steps), also with activation checkpointing and with
// accumulation (the one process taking the same micro-batches).
func TestMPIZero3FourRanks(t *testing.T) {
	bin := mpiBinary(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		extra    []string
		accum    string // the one process's -accum
		prefetch bool   // -zero-prefetch on the ranks
	}{
		{"plain", nil, "1", false},
		{"checkpoint every", []string{"-checkpoint", "every"}, "1", false},
		{"accum 2", []string{"-accum", "2"}, "2", false},
		// The gathers started ahead on the Async's goroutine, which
		// hands them to the MPI thread while the rank computes.
		{"checkpoint every, prefetch", []string{"-checkpoint", "every"}, "1", true},
	} {
		one := filepath.Join(dir, "one.safetensors")
		args := append(append(append([]string{}, small...), tc.extra...), "-batch", "8", "-accum", tc.accum, "-save", one)
		var stderr bytes.Buffer
		if code := run(context.Background(), args, io.Discard, &stderr); code != 0 {
			t.Fatalf("%s, one process: exit %d\n%s", tc.name, code, stderr.String())
		}
		four := filepath.Join(dir, "four.safetensors")
		args = append(append(append([]string{}, small...), tc.extra...), "-batch", "2", "-dist", "mpi", "-zero", "3", "-save", four)
		if tc.prefetch {
			args = append(args, "-zero-prefetch")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := mpirun(ctx, 4, bin, args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s, 4 ranks: %v\n%s", tc.name, err, out)
		}
		if d := maxRelDiff(readWeights(t, four), readWeights(t, one)); d > 1e-5 {
			t.Errorf("%s: 4 ranks × 2 (ZeRO 3) differ from 1 × 8 by %.2g > 1e-5", tc.name, d)
		} else {
			t.Logf("%s: 4 ranks × 2 (ZeRO 3) against 1 × 8: %.2g", tc.name, d)
		}
	}
}

// TestMPIRankDeath kills rank 1 mid-run (-zero 2, and -zero 3, whose
// ranks hold only shards of the weights): the job must end non-zero
// within 60 s naming the dead rank, the last checkpoint must stay valid,
// and one process must resume from it.
func TestMPIRankDeath(t *testing.T) {
	for _, zero := range []string{"2", "3"} {
		t.Run("zero "+zero, func(t *testing.T) { testMPIRankDeath(t, zero) })
	}
}

func testMPIRankDeath(t *testing.T, zero string) {
	bin := mpiBinary(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.safetensors")
	args := append(append([]string{}, small...), "-batch", "4", "-dist", "mpi", "-zero", zero,
		"-steps", "100000", "-save", state, "-save-every", "10")
	cmd, out := startJob(t, 2, bin, args...)
	waitFor(t, "a checkpoint", out, func() bool {
		_, err := os.Stat(state)
		return err == nil
	})
	pid := rankPID(t, cmd.Process.Pid, bin, 1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := waitExit(t, cmd, "rank 1 was killed", out); err == nil {
		t.Fatalf("mpirun exited 0 after rank 1 was killed:\n%s", out)
	} else {
		t.Logf("mpirun ended %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
	}
	// Open MPI says "process rank 1 ... exited on signal 9" or names it
	// as "Process name: [[job,1],1]", depending on how it died.
	if !regexp.MustCompile(`process rank 1 |Process name: +\[\[\d+,\d+\],1\]`).MatchString(out.String()) {
		t.Errorf("the output does not name rank 1:\n%s", out.String())
	}
	// The checkpoint is whole, and one process takes over from it.
	_, meta, err := train.ReadSafetensors(state)
	if err != nil {
		t.Fatalf("checkpoint after the crash: %v", err)
	}
	step, _ := strconv.Atoi(meta["step"])
	resumed := append(append([]string{}, small...), "-batch", "8", "-resume", state, "-steps", strconv.Itoa(step+5))
	var stderr bytes.Buffer
	if code := run(context.Background(), resumed, io.Discard, &stderr); code != 0 {
		t.Fatalf("resuming on one process from step %d: exit %d\n%s", step, code, stderr.String())
	}
}

// jobOutput collects a running job's output; safe to read while the
// job writes.
type jobOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *jobOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *jobOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// startJob starts bin on n ranks under mpirun in the background, killed
// when the test ends.
func startJob(t *testing.T, n int, bin string, args ...string) (*exec.Cmd, *jobOutput) {
	t.Helper()
	cmd := mpirun(context.Background(), n, bin, args...)
	out := &jobOutput{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, out
}

// waitFor polls cond until it holds, failing the test after 90 s.
func waitFor(t *testing.T, what string, out fmt.Stringer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 90 s:\n%s", what, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExit waits for cmd to end, failing the test if it runs on 60 s after
// what happened to it; it returns cmd's exit error.
func waitExit(t *testing.T, cmd *exec.Cmd, after string, out fmt.Stringer) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("still running 60 s after %s:\n%s", after, out)
		return nil
	}
}

// rankPID finds the process of MPI rank r of the job mpirun (pid) started:
// a process running bin whose environment says OMPI_COMM_WORLD_RANK=r.
func rankPID(t *testing.T, mpirunPID int, bin string, r int) int {
	t.Helper()
	want := "OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r)
	for range 200 {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
			if err != nil || exe != bin {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil {
				continue
			}
			for _, kv := range strings.Split(string(env), "\x00") {
				if kv == want {
					return pid
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no process of rank %d under mpirun %d", r, mpirunPID)
	return 0
}

// TestMPIInterrupt sends SIGINT to mpirun, which passes it to the ranks:
// they must agree on one step to stop at, rank 0 must save the gathered
// state there, and every rank must say where it is.
func TestMPIInterrupt(t *testing.T) {
	bin := mpiBinary(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state.safetensors")
	metrics := filepath.Join(dir, "m.jsonl")
	args := append(append([]string{}, small...), "-batch", "4", "-dist", "mpi", "-zero", "1",
		"-steps", "100000", "-save", state, "-metrics", metrics)
	cmd, out := startJob(t, 2, bin, args...)
	waitFor(t, "20 steps", out, func() bool {
		b, _ := os.ReadFile(metrics)
		return bytes.Count(b, []byte("\n")) >= 20
	})
	cmd.Process.Signal(syscall.SIGINT)
	waitExit(t, cmd, "SIGINT", out)
	steps := regexp.MustCompile(`training interrupted at step (\d+); state saved to`).FindAllStringSubmatch(out.String(), -1)
	if len(steps) != 2 || steps[0][1] != steps[1][1] {
		t.Fatalf("want both ranks interrupted at one step, state saved:\n%s", out.String())
	}
	_, meta, err := train.ReadSafetensors(state)
	if err != nil || meta["step"] != steps[0][1] {
		t.Fatalf("state at step %q (%v), ranks stopped at %s", meta["step"], err, steps[0][1])
	}
}

// TestMPIFitPlansTheJob: under mpirun, -fit without -ranks plans one rank
// of the job (mpirun's -np), so it can choose a ZeRO stage, and the run
// then peaks at what it predicted.
func TestMPIFitPlansTheJob(t *testing.T) {
	bin := mpiBinary(t)
	base := append(append([]string{}, small...), "-steps", "3", "-batch", "4", "-dist", "mpi")
	// A budget of stage 1's plan for one rank of 2: one process's
	// replicas need more, whatever the accumulation or checkpointing.
	cfg := train.Default()
	if err := parseFlags(&cfg, append(append([]string{}, base...), "-zero", "1", "-ranks", "2")); err != nil {
		t.Fatal(err)
	}
	p, err := train.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	summary := filepath.Join(t.TempDir(), "s.json")
	args := append(append([]string{}, base...), "-fit", strconv.FormatInt(p.Total, 10), "-summary", summary)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := mpirun(ctx, 2, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "-zero 1 ") {
		t.Errorf("-fit under mpirun -np 2 did not choose -zero 1:\n%s", out)
	}
	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatal(err)
	}
	var s train.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Config.Parallel.Zero != 1 || s.PeakBytes.Total > p.Total {
		t.Errorf("the run trained with -zero %d and peaked at %d B; want -zero 1 within the budget %d B", s.Config.Parallel.Zero, s.PeakBytes.Total, p.Total)
	}
}
