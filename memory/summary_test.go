package memory

import (
	"strings"
	"testing"

	"github.com/memfit/memfit/internal/goldenfile"
)

func TestSummary(t *testing.T) {
	a := New(NewCountingRaw(GiB, "cpu"))
	w := mustAlloc(t, a, 40*MiB, Parameter)
	g := mustAlloc(t, a, 40*MiB, Gradient)
	m := mustAlloc(t, a, 80*MiB, OptimizerState)
	var acts []*Block
	for range 6 {
		acts = append(acts, mustAlloc(t, a, 3*MiB, Activation))
	}
	tmp := mustAlloc(t, a, 300*KiB, Temporary)
	d := mustAlloc(t, a, 700_000, Data)
	for _, b := range acts[:5] {
		a.Free(b)
	}
	a.Free(tmp)
	a.Free(mustAlloc(t, a, 16*MiB, Temporary)) // an idle segment of its own
	// 900 MiB does not fit: the idle segment goes back to Raw, the retry
	// fails too.
	if _, err := a.Alloc(900*MiB, Activation); err == nil {
		t.Fatal("900 MiB fit")
	}
	if s := a.Stats(); s.Retries != 1 || s.RawFrees != 1 || s.OOMs != 1 {
		t.Fatalf("retries %d raw frees %d OOMs %d", s.Retries, s.RawFrees, s.OOMs)
	}
	got := a.Summary()
	goldenfile.Check(t, "summary.golden", got)

	for i, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if len(line) != summaryInner+2 {
			t.Errorf("line %d is %d characters wide, want %d: %q", i, len(line), summaryInner+2, line)
		}
	}
	for _, b := range []*Block{w, g, m, acts[5], d} {
		a.Free(b)
	}
}

func TestSummaryUnlimited(t *testing.T) {
	a := New(NewCountingRaw(0, "meta"))
	if s := a.Summary(); !strings.Contains(s, "device meta, unlimited capacity") {
		t.Fatalf("summary title:\n%s", s)
	}
}

// TestSummaryProcessRSS: a snapshot that carries the process's resident
// set shows it in the summary beside the allocator's bytes; one that does
// not (the default) renders as before.
func TestSummaryProcessRSS(t *testing.T) {
	a := New(NewCountingRaw(GiB, "cpu"))
	defer a.Free(mustAlloc(t, a, 3*MiB, Activation))
	s := a.Snapshot()
	if got := s.Summary(); strings.Contains(got, "Process RSS") || got != a.Summary() {
		t.Errorf("a snapshot without RSS renders differently from the allocator:\n%s", got)
	}
	s.RSS, s.PeakRSS = 40<<20, 50<<20
	want := "| Process RSS (OS)        |   40.00 MiB |   50.00 MiB |             |             |"
	if got := s.Summary(); !strings.Contains(got, want) {
		t.Errorf("summary lacks %q:\n%s", want, got)
	}
}
