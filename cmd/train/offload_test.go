package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memfit/memfit/internal/goldenfile"
	"github.com/memfit/memfit/train"
)

// TestOffloadFlags: -offload trains, and the summary's peaks say what
// the host held; -plan with -offload adds the host's rows.
func TestOffloadFlags(t *testing.T) {
	dir := t.TempDir()
	gpt := []string{"-model", "gpt", "-layers", "2", "-width", "32", "-heads", "4", "-context", "16", "-batch", "8"}
	mlp := []string{"-layers", "2", "-width", "64", "-batch", "32"}
	for _, c := range []struct {
		name       string
		args       []string
		acts, opts bool // host activations, host optimizer state
	}{
		{"mlp off", append(mlp, "-offload", "off"), false, false},
		{"mlp activations", append(mlp, "-offload", "activations"), true, false},
		{"mlp optimizer", append(mlp, "-offload", "optimizer"), false, true},
		{"gpt all", append(gpt, "-offload", "all"), true, true},
		{"gpt activations prefetch checkpoint", append(gpt, "-offload", "activations", "-offload-prefetch", "1", "-checkpoint", "every"), true, false},
		{"gpt optimizer bf16 accum", append(gpt, "-offload", "optimizer", "-amp", "bf16", "-accum", "2"), false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			summary := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".json")
			args := append([]string{"-quiet", "-steps", "2", "-eval-every", "0", "-summary", summary}, c.args...)
			if code, _, errs := runCmd(t, args...); code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			b, err := os.ReadFile(summary)
			if err != nil {
				t.Fatal(err)
			}
			var s train.Summary
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			p := s.PeakBytes
			if got := p.HostActivation > 0; got != c.acts {
				t.Errorf("host activation peak %d", p.HostActivation)
			}
			if got := p.HostOptimizerState > 0 && p.HostParameter > 0; got != c.opts {
				t.Errorf("host optimizer state %d, masters %d", p.HostOptimizerState, p.HostParameter)
			}
			if c.opts && p.OptimizerState != 0 {
				t.Errorf("%d bytes of optimizer state on the device", p.OptimizerState)
			}
		})
	}
}

func TestPlanReportOffload(t *testing.T) {
	code, out, errs := runCmd(t, "-plan", "-model", "gpt", "-layers", "2", "-width", "64", "-heads", "4", "-context", "32", "-batch", "8", "-offload", "all")
	if code != 0 {
		t.Fatalf("-plan exited %d: %s", code, errs)
	}
	goldenfile.Check(t, "plan_offload.golden", out)
}

// TestOffloadHostMemReport: with -offload, -mem-report writes the host
// memory's report beside the device's (mem.txt: mem.host.txt), and it
// shows what lives there: the optimizer's state and master weights.
func TestOffloadHostMemReport(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mem.txt")
	code, _, errs := runCmd(t, "-model", "gpt", "-layers", "2", "-width", "32", "-heads", "4", "-context", "16", "-steps", "2", "-quiet",
		"-offload", "optimizer", "-mem-report", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	dev, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.ReadFile(filepath.Join(dir, "mem.host.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(host), "host") || !strings.Contains(string(host), "optimizer_state") {
		t.Errorf("the host's report does not show the host's optimizer state:\n%s", host)
	}
	if strings.Contains(string(dev), "optimizer_state  ") && strings.Contains(string(dev), "device host") {
		t.Errorf("the device's report is the host's:\n%s", dev)
	}
}
