package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// quick is a short run: a one-layer MLP of width 32 for two steps.
var quick = []string{"-quiet", "-steps", "2", "-width", "32", "-layers", "1", "-eval-every", "0"}

// TestOutputsCheckedBeforeTraining: an output that cannot be written, or
// that would overwrite an input, is refused with exit 2 before the first
// step, and nothing a run reads or names is changed.
func TestOutputsCheckedBeforeTraining(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	text := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog. "), 200)
	os.WriteFile(corpus, text, 0o644)
	ckpt := filepath.Join(dir, "ckpt")
	if code, _, errs := runCmd(t, append(quick, "-save", ckpt)...); code != 0 {
		t.Fatalf("making a checkpoint: %d %s", code, errs)
	}
	fifo := mkfifo(t, filepath.Join(dir, "fifo"))
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	jsonlDir := filepath.Join(dir, "d.jsonl")
	os.Mkdir(jsonlDir, 0o755)
	readonly := filepath.Join(dir, "ro")
	os.Mkdir(readonly, 0o555)
	gpt := []string{"-model", "gpt", "-layers", "1", "-width", "16", "-heads", "2", "-context", "8", "-batch", "4"}

	cases := []struct {
		name string
		args []string
		want string
		root bool // meaningless as root, who writes anywhere
	}{
		{"save to a FIFO", []string{"-save", fifo}, "-save " + fifo + " is a named pipe (FIFO), not a regular file", false},
		{"save to a directory", []string{"-save", sub}, "-save " + sub + " is a directory", false},
		{"summary to a directory", []string{"-summary", sub}, "-summary " + sub + " is a directory", false},
		{"metrics to a directory", []string{"-metrics", jsonlDir}, "-metrics " + jsonlDir + " is a directory", false},
		{"save in a missing directory", []string{"-save", filepath.Join(dir, "nope", "w")}, "-save " + filepath.Join(dir, "nope", "w") + ": directory", false},
		{"summary in a read-only directory", []string{"-summary", filepath.Join(readonly, "s.json")}, "cannot write in " + readonly, true},
		{"mem-report extension", []string{"-mem-report", filepath.Join(dir, "x.pdf")}, "-mem-report " + filepath.Join(dir, "x.pdf") + ": want a .html, .svg or .txt file", false},
		{"metrics extension", []string{"-metrics", filepath.Join(dir, "m.xyz")}, "-metrics " + filepath.Join(dir, "m.xyz") + ": want a .csv or .jsonl file", false},
		{"save over the data", append(gpt, "-data", corpus, "-save", corpus), "-save " + corpus + " is also the -data input", false},
		{"summary over the data", append(gpt, "-data", corpus, "-summary", corpus), "-summary " + corpus + " is also the -data input", false},
		{"summary over the resume file", []string{"-resume", ckpt, "-summary", ckpt}, "-summary " + ckpt + " is also the -resume input", false},
		{"metrics over the resume state", []string{"-resume", ckpt, "-metrics", ckpt + ".state.csv", "-summary", ckpt + ".state"}, "is also the -resume input", false},
		{"summary and metrics one file", []string{"-summary", filepath.Join(dir, "o.jsonl"), "-metrics", filepath.Join(dir, "o.jsonl")}, "are the same file", false},
		{"data is a FIFO", []string{"-data", fifo}, "-data " + fifo + " is a named pipe (FIFO): want a regular file or a directory", false},
		{"val-split nan", []string{"-val-split", "nan"}, "-val-split NaN", false},
		// Width 1024: the positions alone are 4 GB, and one example's step
		// is far past any machine this runs on.
		{"nothing fits the machine", []string{"-model", "gpt", "-context", "1000000", "-width", "1024"}, "cannot fit in", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() == 0 {
				t.Skip("root writes anywhere")
			}
			code, out, errs := runCmd(t, append(append([]string{}, quick...), c.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr:\n%s", code, errs)
			}
			if !strings.Contains(errs, c.want) {
				t.Errorf("stderr %q does not say %q", errs, c.want)
			}
			if out != "" {
				t.Errorf("a refused run printed %q", out)
			}
			if b, _ := os.ReadFile(corpus); !bytes.Equal(b, text) {
				t.Errorf("the -data file was changed")
			}
			if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("the FIFO was replaced: %v %v", fi.Mode(), err)
			}
			if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
				t.Errorf("the directory was replaced")
			}
		})
	}
}

// TestOutputsThroughLinksAndStreams: a link is followed and its target
// written, the link kept; a FIFO is written through, not replaced.
func TestOutputsThroughLinksAndStreams(t *testing.T) {
	dir := t.TempDir()
	link := func(name, target string) string {
		p := filepath.Join(dir, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	cases := []struct {
		name   string
		flag   string
		path   string // what the flag names
		target string // where the bytes must land
		want   string // in the target
	}{
		{"summary through a link", "-summary", link("s.json", "real/summary.json"), filepath.Join(dir, "real", "summary.json"), `"final_loss"`},
		{"save through a link", "-save", link("w.safetensors", filepath.Join(dir, "real", "w.safetensors")), filepath.Join(dir, "real", "w.safetensors"), "F32"},
		{"metrics through a link", "-metrics", link("m.jsonl", "real/m.jsonl"), filepath.Join(dir, "real", "m.jsonl"), `"step":2`},
		{"mem-report through a link", "-mem-report", link("r.txt", "real/r.txt"), filepath.Join(dir, "real", "r.txt"), "parameter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append(append([]string{}, quick...), c.flag, c.path)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if fi, err := os.Lstat(c.path); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("%s %s is no longer a link", c.flag, c.path)
			}
			b, err := os.ReadFile(c.target)
			if err != nil || !strings.Contains(strings.ToLower(string(b)), strings.ToLower(c.want)) {
				t.Errorf("link target %s: %v; holds %.80q, want %q in it", c.target, err, b, c.want)
			}
		})
	}

	t.Run("summary into a FIFO", func(t *testing.T) {
		fifo := mkfifo(t, filepath.Join(dir, "summary.fifo"))
		got := make(chan []byte)
		go func() {
			f, err := os.Open(fifo) // blocks until the run opens it for writing
			if err != nil {
				got <- nil
				return
			}
			b, _ := io.ReadAll(f)
			f.Close()
			got <- b
		}()
		code, _, errs := runCmd(t, append(append([]string{}, quick...), "-summary", fifo)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		select {
		case b := <-got:
			if !bytes.Contains(b, []byte(`"final_loss"`)) {
				t.Errorf("the FIFO's reader got %.80q, want the summary", b)
			}
		case <-time.After(10 * time.Second):
			// Nothing was written through: release the reader, which
			// waits in open for a writer.
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Errorf("nothing reached the FIFO's reader")
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("the FIFO was replaced")
		}
	})
}

// TestLaterOutputFailureKeepsState: when an output fails during or after
// the run (a full disk, here /dev/full), the state is saved and the
// message says where.
func TestLaterOutputFailureKeepsState(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	dir := t.TempDir()
	for _, c := range []struct{ flag, name string }{{"-metrics", "m.jsonl"}, {"-summary", "s.json"}, {"-mem-report", "r.txt"}} {
		t.Run(c.flag, func(t *testing.T) {
			full := filepath.Join(dir, c.name)
			os.Remove(full)
			if err := os.Symlink("/dev/full", full); err != nil {
				t.Fatal(err)
			}
			save := filepath.Join(dir, "state"+c.name)
			code, _, errs := runCmd(t, append(append([]string{}, quick...), c.flag, full, "-save", save)...)
			if code != 1 {
				t.Errorf("exit %d, want 1; stderr:\n%s", code, errs)
			}
			if !strings.Contains(errs, c.flag) || !strings.Contains(errs, "saved to "+save) {
				t.Errorf("stderr %q does not name %s and where the state went", errs, c.flag)
			}
			if _, err := os.Stat(save); err != nil {
				t.Errorf("state not saved: %v", err)
			}
		})
	}
}

// TestNothingToTrain: resuming a state at or past -steps says so.
func TestNothingToTrain(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	if code, _, errs := runCmd(t, append(quick, "-save", ckpt)...); code != 0 {
		t.Fatalf("making a checkpoint: %d %s", code, errs)
	}
	for _, steps := range []string{"2", "1"} {
		code, out, errs := runCmd(t, append(append([]string{}, quick...), "-steps", steps, "-resume", ckpt)...)
		if code != 2 || !strings.Contains(errs, "nothing to train") || out != "" {
			t.Errorf("-steps %s from step 2: exit %d, stdout %q, stderr %q; want 2 and nothing to train", steps, code, out, errs)
		}
	}
}

// TestIdleFlagWarnings: flags that would do nothing are warned about once.
func TestIdleFlagWarnings(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"save-every without save", []string{"-save-every", "1"}, "warning: -save-every 1 does nothing without -save"},
		{"freeze everything", []string{"-freeze", "*"}, "warning: -freeze * matches every parameter"},
		{"eval without held-out data", []string{"-val-split", "0", "-eval-every", "1"}, "warning: -eval-every 1: no held-out data"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append(append([]string{}, quick...), c.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if n := strings.Count(errs, c.want); n != 1 {
				t.Errorf("stderr says %q %d times, want once:\n%s", c.want, n, errs)
			}
		})
	}
}

// TestBigRequests: requests too big for the machine or the data's promise
// end in memfit's own errors, at start, naming what and where.
func TestBigRequests(t *testing.T) {
	dir := t.TempDir()
	idx := filepath.Join(dir, "idx")
	header := func(typ byte, dims ...int) []byte {
		b := []byte{0, 0, typ, byte(len(dims))}
		for _, d := range dims {
			b = append(b, byte(d>>24), byte(d>>16), byte(d>>8), byte(d))
		}
		return b
	}
	const n = 20
	for _, prefix := range []string{"train", "t10k"} {
		labels := make([]byte, n)
		if prefix == "train" {
			labels[13] = 200 // Fashion-MNIST has 10 classes
		}
		os.MkdirAll(idx, 0o755)
		os.WriteFile(filepath.Join(idx, prefix+"-images-idx3-ubyte"), append(header(0x08, n, 28, 28), make([]byte, n*28*28)...), 0o644)
		os.WriteFile(filepath.Join(idx, prefix+"-labels-idx1-ubyte"), append(header(0x08, n), labels...), 0o644)
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"label outside the classes", []string{"-data", idx, "-batch", "4"}, 2, "train-labels-idx1-ubyte: record 13: label 200 is outside the 10 classes"},
		{"prefetch beyond the epoch", []string{"-prefetch", "100000000"}, 0, ""},
		{"gpt context of a million", []string{"-model", "gpt", "-context", "1000000", "-width", "1024"}, 2, "activations"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runCmd(t, append(append([]string{}, quick...), c.args...)...)
			if code != c.code || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errs, c.code, c.want)
			}
		})
	}
}
