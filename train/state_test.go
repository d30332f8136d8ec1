package train

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memfit/memfit/internal/sttest"
)

// saveAfter trains cfg for steps steps and saves to path.
func saveAfter(t *testing.T, cfg Config, steps int, path string) *Trainer {
	t.Helper()
	cfg.Optim.Steps, cfg.Output.Save = steps, path
	tr := newTrainer(t, cfg)
	if _, err := tr.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return tr
}

// firstNames returns the first weight and the first optimizer tensor of a
// checkpoint by name.
func firstNames(f *sttest.File) (weight, opt string) {
	names := f.Names()
	sort.Strings(names)
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, OptimizerPrefix) && opt == "":
			opt = n
		case !strings.HasPrefix(n, OptimizerPrefix) && weight == "":
			weight = n
		}
	}
	return weight, opt
}

// TestResumeDetectsDamage damages a checkpoint in each way the reader must
// catch and checks that Resume refuses it naming the file and the tensor
// (or section) at fault. Run B is another run of the same model (another
// seed) whose parts are spliced into run A's checkpoint.
func TestResumeDetectsDamage(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyGPT()
	a, b := filepath.Join(dir, "a.st"), filepath.Join(dir, "b.st")
	saveAfter(t, cfg, 2, a)
	cfgB := cfg
	cfgB.Seed++
	saveAfter(t, cfgB, 2, b)
	fb := sttest.Read(t, b)
	weight, opt := firstNames(sttest.Read(t, a))

	flip := func(name string) func(f *sttest.File) {
		return func(f *sttest.File) {
			d := f.Bytes(t, name)
			d[len(d)/2] ^= 0x10
		}
	}
	spliceBytes := func(name string) func(f *sttest.File) {
		return func(f *sttest.File) { copy(f.Bytes(t, name), fb.Bytes(t, name)) }
	}
	spliceMeta := func(keys ...string) func(f *sttest.File) {
		return func(f *sttest.File) {
			ma, mb := f.Meta(t), fb.Meta(t)
			for _, k := range keys {
				ma[k] = mb[k]
			}
			f.SetMeta(t, ma)
		}
	}
	// withChecksum also takes the tensor's recorded checksum from run B, as
	// a tool that copies "the tensor and its metadata" would.
	withChecksum := func(name string) func(f *sttest.File) {
		return func(f *sttest.File) {
			spliceBytes(name)(f)
			ma, mb := f.Meta(t), fb.Meta(t)
			var sa, sb map[string]string
			json.Unmarshal([]byte(ma["crc32c"]), &sa)
			json.Unmarshal([]byte(mb["crc32c"]), &sb)
			sa[name] = sb[name]
			j, _ := json.Marshal(sa)
			ma["crc32c"] = string(j)
			f.SetMeta(t, ma)
		}
	}
	overlap := func(f *sttest.File) {
		// Move the second tensor (by offset) 4 bytes back, into the first.
		names := f.Names()
		sort.Slice(names, func(i, j int) bool { return f.Entry(t, names[i]).Offsets[0] < f.Entry(t, names[j]).Offsets[0] })
		e := f.Entry(t, names[1])
		e.Offsets[0] -= 4
		e.Offsets[1] -= 4
		f.SetEntry(t, names[1], e)
	}
	cases := []struct {
		name   string
		damage func(f *sttest.File)
		want   []string
	}{
		{"flipped bit in a weight", flip(weight), []string{weight, "CRC-32C"}},
		{"flipped bit in optimizer state", flip(opt), []string{opt, "CRC-32C"}},
		{"edited trainer state", func(f *sttest.File) {
			m := f.Meta(t)
			m["trainer"] = strings.Replace(m["trainer"], `"step":2`, `"step":3`, 1)
			f.SetMeta(t, m)
		}, []string{"trainer state", "CRC-32C"}},
		{"overlapping data_offsets", overlap, []string{"overlap"}},
		{"weights from another run", spliceBytes(weight), []string{weight, "another run"}},
		{"optimizer tensor from another run", spliceBytes(opt), []string{opt, "another run"}},
		{"tensor and its checksum from another run", withChecksum(opt), []string{opt, "another run"}},
		{"trainer state from another run", spliceMeta("trainer"), []string{"trainer state", "another run"}},
		{"trainer state and its checksums from another run", spliceMeta("trainer", "crc32c"), []string{"another run"}},
		{"metadata from another run", spliceMeta("trainer", "crc32c", "run"), []string{opt, "another run"}}, // opt sorts first
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := sttest.Read(t, a)
			c.damage(f)
			path := filepath.Join(t.TempDir(), "damaged.st")
			f.Write(t, path)
			resumeFails(t, cfg, path, c.want...)
		})
	}
}

// resumeFails checks that resuming path fails with an error naming path
// and containing want.
func resumeFails(t *testing.T, cfg Config, path string, want ...string) {
	t.Helper()
	cfg.Output.Resume = path
	dev, err := NewDevice(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(cfg, dev, nil)
	if err == nil {
		tr.Close()
		t.Fatalf("resumed from %s", path)
	}
	t.Log(err)
	for _, w := range append(want, path) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

// TestResumeRefusesNonRegularFiles: a directory or a FIFO is refused at
// once, saying what it is (a FIFO would block an open for reading).
func TestResumeRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A reader that opens the FIFO would block until a writer comes:
	// be that writer, so that a regression fails instead of hanging.
	stop, opened := make(chan struct{}), make(chan bool, 1)
	defer close(stop)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			// Succeeds only while someone has the FIFO open for reading.
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
				opened <- true
				return
			}
		}
	}()
	for _, c := range []struct{ path, want string }{
		{dir, "a directory"},
		{fifo, "a named pipe (FIFO)"},
	} {
		resumeFails(t, tinyGPT(), c.path, "is "+c.want+", not a checkpoint file")
		if _, _, err := ReadSafetensors(c.path); err == nil || !strings.Contains(err.Error(), c.want+", not a regular file") {
			t.Errorf("ReadSafetensors(%s): %v, want %q", c.path, err, c.want)
		}
	}
	select {
	case <-opened:
		t.Errorf("%s was opened for reading", fifo)
	default:
	}
}

// TestResumeLegacyPair: a memfit/1 checkpoint (weights in PATH, the rest
// in PATH.state) resumes as its memfit/2 equivalent does, a pair with
// different steps is refused as before, and the first save over it
// removes the PATH.state it no longer uses.
func TestResumeLegacyPair(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyGPT()
	v2 := filepath.Join(dir, "v2.st")
	saveAfter(t, cfg, 2, v2)

	cont := cfg
	cont.Optim.Steps, cont.Output.Resume = 4, v2
	want := newTrainer(t, cont)
	if _, err := want.Run(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Rewrite v2 as a memfit/1 pair: what a memfit/1 Save wrote.
	legacy := filepath.Join(dir, "v1.st")
	writeLegacy := func(step string) {
		tensors, meta, err := ReadSafetensors(v2)
		if err != nil {
			t.Fatal(err)
		}
		w, o := map[string]Tensor{}, map[string]Tensor{}
		for n, v := range tensors {
			if k, ok := strings.CutPrefix(n, OptimizerPrefix); ok {
				o[k] = v
			} else {
				w[n] = v
			}
		}
		var st map[string]any
		json.Unmarshal([]byte(meta["trainer"]), &st)
		delete(st, "run")
		tj, _ := json.Marshal(st)
		if err := WriteSafetensors(legacy+".state", o, map[string]string{"format": legacyFormat, "trainer": string(tj)}); err != nil {
			t.Fatal(err)
		}
		if err := WriteSafetensors(legacy, w, map[string]string{"format": legacyFormat, "model": meta["model"], "step": step}); err != nil {
			t.Fatal(err)
		}
	}

	writeLegacy("3")
	resumeFails(t, cfg, legacy, "weights are from step 3", "an interrupted save?")

	writeLegacy("2")
	cont.Output.Resume, cont.Output.Save = legacy, legacy
	got := newTrainer(t, cont)
	if got.Step() != 2 {
		t.Fatalf("resumed memfit/1 at step %d, want 2", got.Step())
	}
	if _, err := got.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameWeights(t, weights(t, want), weights(t, got))
	if _, err := os.Stat(legacy + ".state"); !os.IsNotExist(err) {
		t.Errorf("%s.state is still there after a memfit/2 save (%v)", legacy, err)
	}
	if _, meta, err := ReadSafetensors(legacy); err != nil || meta["format"] != formatVersion {
		t.Errorf("%s after the save: format %q, %v", legacy, meta["format"], err)
	}

	// A crash after the memfit/2 rename, before the removal, leaves a
	// stale memfit/1 PATH.state beside it: Resume ignores it.
	stale := legacy + ".state"
	if err := WriteSafetensors(stale, nil, map[string]string{"format": legacyFormat, "trainer": `{"step":1}`}); err != nil {
		t.Fatal(err)
	}
	cont.Output.Save, cont.Optim.Steps = "", 4
	if r := newTrainer(t, cont); r.Step() != 4 {
		t.Errorf("resumed at step %d beside a stale %s, want 4", r.Step(), stale)
	}
}

// TestRunIDKeptOnResume: a fresh run has an id of its own, a resumed run
// keeps the id it resumed.
func TestRunIDKeptOnResume(t *testing.T) {
	dir := t.TempDir()
	cfg := tinyGPT()
	path := filepath.Join(dir, "s.st")
	first := saveAfter(t, cfg, 1, path)
	if other := newTrainer(t, cfg); other.runID == first.runID || len(first.runID) != 16 {
		t.Errorf("run ids %q and %q: want two different 16-digit ids", first.runID, other.runID)
	}
	cfg.Output.Resume = path
	if r := newTrainer(t, cfg); r.runID != first.runID {
		t.Errorf("resumed run has id %q, saved run %q", r.runID, first.runID)
	}
}
