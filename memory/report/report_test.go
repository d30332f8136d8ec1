package report_test

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memfit/memfit/internal/goldenfile"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/memory/report"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// scripted is a small run on the meta device with fixed sites and times, so
// that its reports are the same every time: parameters made before history
// was on (their site unknown), four steps of activations and gradients, a
// per-step leak, a temporary turned into a gradient, and a failed
// allocation.
func scripted(t *testing.T) memory.Snapshot {
	t.Helper()
	a := memory.New(memory.NewCountingRaw(64*mib, "meta"))
	site := "init.go:3"
	a.SetSiteFunc(func() string { return site })
	alloc := func(n int64, c memory.Category, s string) *memory.Block {
		site = s
		b, err := a.Alloc(n, c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	w := alloc(6*mib, memory.Parameter, "")
	a.EnableHistory(10_000)
	var kept []*memory.Block
	for step := range 4 {
		a.SetStep(int64(step))
		x := alloc(200*kib, memory.Data, "/src/train/loop.go:40")
		var acts []*memory.Block
		for range 3 + step {
			acts = append(acts, alloc(2*mib, memory.Activation, "/src/models/mlp.go:17"))
		}
		kept = append(kept, alloc(512, memory.Activation, "/src/train/loop.go:52")) // the leak
		g := alloc(6*mib, memory.Temporary, "/src/tensor/autograd.go:210")
		a.Recategorize(g, memory.Gradient)
		for i := len(acts) - 1; i >= 0; i-- {
			tmp := alloc(1*mib, memory.Temporary, "/src/models/mlp.go:30")
			a.Free(acts[i])
			a.Free(tmp)
		}
		if step == 2 {
			if _, err := a.Alloc(80*mib, memory.Activation); err == nil {
				t.Fatal("80 MiB fit in 64 MiB")
			}
		}
		if step == 0 {
			kept = append(kept, alloc(12*mib, memory.OptimizerState, "/src/optim/adam.go:88"))
		}
		a.Free(g)
		a.Free(x)
	}
	a.SetStep(4)
	s := a.Snapshot()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range s.History {
		s.History[i].Time = t0.Add(time.Duration(i) * 1500 * time.Microsecond)
	}
	for _, b := range append(kept, w) {
		a.Free(b)
	}
	return s
}

func render(t *testing.T, format string, s memory.Snapshot) string {
	t.Helper()
	var b strings.Builder
	if err := report.WriteSnapshot(&b, format, s); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTextReport(t *testing.T) {
	got := render(t, report.Text, scripted(t))
	goldenfile.Check(t, "report.txt.golden", got)
	for _, want := range []string{
		"memfit memory summary: device meta",
		"segment map: ",
		"peak: ",
		"/src/models/mlp.go:17",
		"(site unknown: allocated before history was on",
		"out of memory at event",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("text report lacks %q", want)
		}
	}
}

func TestSVGReport(t *testing.T) {
	got := render(t, report.SVG, scripted(t))
	goldenfile.Check(t, "report.svg.golden", got)
	wellFormed(t, got)
	for _, want := range []string{
		`xmlns="http://www.w3.org/2000/svg"`,
		">30 MiB<",                 // a y tick with its unit
		">step 3<",                 // a step label
		"stroke-dasharray=\"3 3\"", // step boundaries
		">peak 37.20 MiB at step 3<",
		">reserved<", ">activation<", ">gradient<", ">optimizer_state<",
		"out of memory at step 2",
		"mlp.go:17",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestHTMLReport(t *testing.T) {
	got := render(t, report.HTML, scripted(t))
	if strings.Contains(got, "http:") || strings.Contains(got, "https:") || strings.Contains(got, "//cdn") {
		t.Error("the HTML page refers to the network")
	}
	for _, tag := range []string{"<link", "<img", "<iframe", " src="} {
		if strings.Contains(got, tag) {
			t.Errorf("the HTML page loads a resource (%s)", tag)
		}
	}
	svg := got[strings.Index(got, "<svg"):]
	svg = svg[:strings.Index(svg, "</svg>")+len("</svg>")]
	wellFormed(t, svg)
	for _, id := range []string{`id="timeline"`, `id="hit"`, `id="cursor"`, `id="tip"`, `id="memdata"`} {
		if !strings.Contains(got, id) {
			t.Errorf("page lacks %s", id)
		}
	}
	data := got[strings.Index(got, `id="memdata">`)+len(`id="memdata">`):]
	data = data[:strings.Index(data, "</script>")]
	var d struct {
		N     int       `json:"n"`
		Sites []string  `json:"sites"`
		S     [][]int64 `json:"s"`
	}
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		t.Fatalf("hover data: %v", err)
	}
	if len(d.S) == 0 || len(d.S) > 1000 || d.N < len(d.S) || len(d.Sites) == 0 {
		t.Errorf("hover data: %d points, %d samples, %d sites", d.N, len(d.S), len(d.Sites))
	}
	for _, sec := range []string{"<h2>Timeline</h2>", "<h2>Segments</h2>", "<h2>Summary</h2>"} {
		if !strings.Contains(got, sec) {
			t.Errorf("page lacks %s", sec)
		}
	}
}

func TestReportWithoutHistory(t *testing.T) {
	a := memory.New(memory.NewCountingRaw(0, "meta"))
	b, _ := a.Alloc(5000, memory.Parameter)
	defer a.Free(b)
	for _, f := range []string{report.SVG, report.HTML, report.Text} {
		var w strings.Builder
		if err := report.Write(&w, f, a); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(w.String(), "EnableHistory") {
			t.Errorf("%s report does not say how to record a history", f)
		}
	}
}

func TestFormatOf(t *testing.T) {
	for path, want := range map[string]string{
		"out.html": "html", "A.HTM": "html", "x/y.svg": "svg", "m.txt": "txt", "m.TEXT": "txt",
	} {
		if got, err := report.FormatOf(path); got != want || err != nil {
			t.Errorf("FormatOf(%q) = %q, %v, want %q", path, got, err, want)
		}
	}
	for _, path := range []string{"out.png", "out", "html"} {
		if _, err := report.FormatOf(path); err == nil || !strings.Contains(err.Error(), ".html, .svg or .txt") {
			t.Errorf("FormatOf(%q): %v", path, err)
		}
	}
	if err := report.Write(io.Discard, "pdf", memory.New(memory.NewCountingRaw(0, ""))); err == nil {
		t.Error("Write accepted format pdf")
	}
}

func TestWriteFile(t *testing.T) {
	a := memory.New(memory.NewCountingRaw(0, "meta"))
	a.EnableHistory(100)
	b, _ := a.Alloc(5000, memory.Parameter)
	defer a.Free(b)
	dir := t.TempDir()
	path := filepath.Join(dir, "mem.txt")
	if err := os.WriteFile(path, []byte("old report"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteFile(path, a); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(got), "memfit memory summary") {
		t.Fatalf("report %q, %v", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("report mode %v, want 0644", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left beside the report: %v", entries)
	}
	// Failures name the file and leave nothing behind.
	if err := report.WriteFile(filepath.Join(dir, "mem.png"), a); err == nil {
		t.Error("WriteFile wrote a .png")
	}
	missing := filepath.Join(dir, "no", "such", "dir", "mem.html")
	if err := report.WriteFile(missing, a); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteFile into a missing directory: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left after failures: %v", entries)
	}
}

func TestGPTReport(t *testing.T) {
	a := trainGPT(t, 3)
	var w strings.Builder
	if err := report.Write(&w, report.Text, a); err != nil {
		t.Fatal(err)
	}
	got := w.String()
	// The peak is inside a step, with activations and the sites of the
	// model's lines; a step ends with parameters and optimizer state only.
	for _, want := range []string{"at the peak, by category: activation", "gpt_test.go:", "optimizer_state"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if dir := os.Getenv("MEMFIT_KEEP_REPORT"); dir != "" {
		for _, name := range []string{"gpt.svg", "gpt.html", "gpt.txt"} {
			if err := report.WriteFile(filepath.Join(dir, name), a); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func wellFormed(t *testing.T, doc string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}

// Every step is labelled, however many there are: too close for "step N"
// across, the numbers stand upright.
func TestSVGLabelsEveryStep(t *testing.T) {
	a := memory.New(memory.NewCountingRaw(64*mib, "meta"))
	a.EnableHistory(10_000)
	const steps = 40
	for step := range steps {
		a.SetStep(int64(step))
		b, err := a.Alloc(mib, memory.Activation)
		if err != nil {
			t.Fatal(err)
		}
		a.Free(b)
	}
	var out strings.Builder
	if err := report.WriteSnapshot(&out, "svg", a.Snapshot()); err != nil {
		t.Fatal(err)
	}
	svg := out.String()
	for step := range steps {
		if !strings.Contains(svg, `fill="#444">`+strconv.Itoa(step)+`</text>`) {
			t.Errorf("step %d has no label", step)
		}
	}
	if !strings.Contains(svg, "rotate(-90") {
		t.Error("40 steps across the chart are labelled across, where they overlap")
	}
}
