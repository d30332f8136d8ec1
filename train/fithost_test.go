package train

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	_ "github.com/memfit/memfit/device/cuda" // registers "cuda", the device with memory of its own these plans are for
)

// withHostCapacity makes n this machine's available host memory (less
// the margin) for the test: plans and checks must not depend on the
// machine that runs them.
func withHostCapacity(t *testing.T, n int64) {
	t.Helper()
	old := hostCapacity
	hostCapacity = func() int64 { return n }
	t.Cleanup(func() { hostCapacity = old })
}

// hostFitConfig is TestFitOffloadsLast's run, on a device with memory of
// its own, and a device budget only an offloading candidate meets.
func hostFitConfig(t *testing.T, dev string) (Config, int64) {
	t.Helper()
	cfg := tinyGPT()
	cfg.Model.Width, cfg.Model.Context, cfg.Optim.Batch, cfg.Model.Dropout, cfg.Model.Layers, cfg.Optim.Name = 32, 64, 4, 0, 8, "sgd"
	cfg.Device.Name = dev
	c := cfg
	c.Memory.Accum, c.Memory.Checkpoint, c.Precision.AMP, c.Precision.Weights, c.Memory.Offload.Mode = cfg.Optim.Batch, "off", "bf16", "bf16", "activations"
	p, err := Plan(c)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Fit = need(c, p)
	return cfg, cfg.Fit
}

// TestFitHostBudget: on a device with memory of its own -fit skips every
// candidate whose host side is over the host budget (-fit-host, or by
// default this machine's available memory) and takes the next that fits
// both, or says that the host budget ruled the device's fits out; with a
// large host budget it chooses what it chose without one; on the CPU the
// host budget does not apply (the one budget counts both).
func TestFitHostBudget(t *testing.T) {
	withHostCapacity(t, 0) // no host budget: the search as before it
	cfg, budget := hostFitConfig(t, "cuda")
	free, err := Fit(cfg, budget)
	if err != nil {
		t.Fatal(err)
	}
	if !free.Config.offloads() || free.Peak.HostTotal == 0 {
		t.Fatalf("Fit(%d) chose %s: want an offloading choice with a host side", budget, free.Flags(cfg))
	}
	host := free.Peak.HostTotal
	cpuCfg, cpuBudget := hostFitConfig(t, "cpu")
	cpuFree, err := Fit(cpuCfg, cpuBudget)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name     string
		cpu      bool
		fitHost  int64  // -fit-host
		capacity int64  // this machine's available host memory
		want     string // "same": free's choice; "next": another within the host budget; else the error's words
	}{
		{"-fit-host large", false, 1 << 40, 0, "same"},
		{"available memory large", false, 0, 1 << 40, "same"},
		{"-fit-host at the host side", false, host, 0, "same"},
		{"-fit-host below the host side", false, host - 1, 1 << 40, "next"},
		{"available memory below the host side", false, 0, host - 1, "next"},
		{"-fit-host tiny", false, 1 << 10, 1 << 40, "nothing fits 1.00 KiB of host memory (-fit-host): "},
		{"available memory tiny", false, 0, 1 << 10, "of host memory (this machine's available memory less a margin; -fit-host sets it)"},
		{"cpu: no host budget", true, 0, 1 << 10, "same"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withHostCapacity(t, tc.capacity)
			c, b, want := cfg, budget, free
			if tc.cpu {
				c, b, want = cpuCfg, cpuBudget, cpuFree
				if hostBudget(c) != 0 {
					t.Errorf("hostBudget on -device cpu = %d, want none", hostBudget(c))
				}
			}
			c.FitHost = tc.fitHost
			got, err := Fit(c, b)
			switch tc.want {
			case "same":
				if err != nil || !reflect.DeepEqual(got.Config, withFitHost(want.Config, tc.fitHost)) {
					t.Errorf("chose %s (%v); want %s, the choice without a host budget", got.Flags(c), err, want.Flags(c))
				}
			case "next":
				if err != nil {
					t.Fatal(err)
				}
				hb := hostBudget(c)
				if got.Peak.HostTotal > hb || got.Need() > b || got.Flags(c) == free.Flags(c) {
					t.Errorf("chose %s, host side %d (budget %d), device %d (budget %d); want another choice within both", got.Flags(c), got.Peak.HostTotal, hb, got.Need(), b)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "-fit-host") {
					t.Errorf("Fit: %v (chose %s); want nothing to fit, naming %q and -fit-host", err, got.Flags(c), tc.want)
				}
			}
		})
	}
}

func withFitHost(c Config, n int64) Config { c.FitHost = n; return c }

// TestFitHostFlag: -fit-host is a size for -fit on a device with memory
// of its own, bounded; refused without -fit and on the CPU, where -fit's
// size budgets device and host together.
func TestFitHostFlag(t *testing.T) {
	for _, tc := range []struct {
		args, want string // want "": accepted
	}{
		{"-device cuda -fit 16GiB -fit-host 120GiB", ""},
		{"-device cuda -fit 16GiB", ""},
		{"-device cuda -fit-host 120GiB", "-fit-host 128849018880: needs -fit"},
		{"-device cpu -fit 16GiB -fit-host 120GiB", "-fit-host 128849018880: -device cpu's memory is the host's"},
		{"-device cuda -fit 16GiB -fit-host 1025TiB", "-fit-host 1126999418470400: want a size up to 1024TiB"},
	} {
		cfg := Default()
		err := NewFlags("train", &cfg).Parse(strings.Fields(tc.args))
		if err == nil {
			err = cfg.Validate()
		}
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// TestPreflightHostSide: a run on a device with memory of its own whose
// one-example step keeps more in host memory than this machine has
// available is refused at start, naming both; one that fits, one on the
// CPU (whose device capacity is that memory) and one after -fit chose
// within the machine's memory are not.
func TestPreflightHostSide(t *testing.T) {
	cfg := tinyGPT()
	cfg.Device.Name, cfg.Memory.Offload.Mode = "cuda", "all"
	small := cfg
	small.Optim.Batch = 1
	p, err := Plan(small)
	if err != nil {
		t.Fatal(err)
	}
	host := p.HostTotal
	if host == 0 {
		t.Fatal("the offloaded plan has no host side")
	}
	cases := []struct {
		name     string
		edit     func(*Config)
		capacity int64 // this machine's available host memory
		refused  bool
	}{
		{"fits", nil, host, false},
		{"over", nil, host - 1, true},
		{"not offloaded", func(c *Config) { c.Memory.Offload.Mode = "off" }, 1, false},
		{"cpu", func(c *Config) { c.Device.Name = "cpu" }, 1, false},
		{"after -fit", func(c *Config) { c.Fit = 1 << 40 }, host - 1, false},
		{"after -fit with -fit-host over the machine", func(c *Config) { c.Fit, c.FitHost = 1<<40, 1<<40 }, host - 1, true},
		{"unknown machine", nil, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			withHostCapacity(t, tc.capacity)
			c := cfg
			if tc.edit != nil {
				tc.edit(&c)
			}
			err := Preflight(c, 0)
			if !tc.refused {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("not refused")
			}
			for _, w := range []string{"host side cannot fit", fmt.Sprintf("(%d bytes) of host memory", host), fmt.Sprintf("(%d bytes) is available", host-1)} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v; want it to say %q", err, w)
				}
			}
		})
	}
}

// TestWritePlanHostBudget: a plan on a device with memory of its own
// prints its host side's categories and total and, beside them, the
// budget it is held to: this machine's available memory, or -fit's
// (-fit-host, or that memory by default); on the CPU, device and host
// together.
func TestWritePlanHostBudget(t *testing.T) {
	withHostCapacity(t, 3<<30)
	cfg := tinyGPT()
	cfg.Memory.Offload.Mode = "all"
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"cuda", func(c *Config) { c.Device.Name = "cuda" }, []string{"available              3.00 GiB  (this machine's available memory less a margin; a run whose one-example step needs more is refused at start)"}},
		{"cuda -fit", func(c *Config) { c.Device.Name, c.Fit = "cuda", 1<<30 }, []string{"budget                 3.00 GiB  (-fit's host budget: this machine's available memory less a margin; -fit-host sets it)"}},
		{"cuda -fit-host", func(c *Config) { c.Device.Name, c.Fit, c.FitHost = "cuda", 1<<30, 2<<30 }, []string{"budget                 2.00 GiB  (-fit's host budget: -fit-host)"}},
		{"cpu", nil, []string{"together"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.edit != nil {
				tc.edit(&c)
			}
			p, err := Plan(c)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			WritePlan(&b, c, p)
			out := b.String()
			for _, w := range append([]string{"host memory (-offload all)", "activation", "optimizer_state"}, tc.want...) {
				if !strings.Contains(out, w) {
					t.Errorf("the plan does not say %q:\n%s", w, out)
				}
			}
			if tc.name == "cpu" && (strings.Contains(out, "budget") || strings.Contains(out, "available")) {
				t.Errorf("a host budget on -device cpu:\n%s", out)
			}
		})
	}
}
