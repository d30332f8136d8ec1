package train

import (
	"errors"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/internal/procmem"
	"github.com/memfit/memfit/memory"
)

// TestDefaultCPUCapacity: with no -mem-limit the CPU device is as large as
// the machine allows, less the margin, so an over-size request is memfit's
// OOM error (with its categories and hint), not the Go runtime's fatal one;
// -mem-limit still overrides it; the meta device the planner uses stays
// unlimited.
func TestDefaultCPUCapacity(t *testing.T) {
	limit, ok := procmem.Limit()
	if !ok {
		t.Skip("this system does not say how much memory a process may use")
	}
	c := cpu.DefaultCapacity()
	if c <= 0 || c >= limit {
		t.Errorf("cpu.DefaultCapacity() = %d with a limit of %d; want a positive size below it", c, limit)
	}
	cases := []struct {
		name     string
		device   string
		memLimit int64
		want     int64
	}{
		{"cpu default", "cpu", 0, c},
		{"cpu -mem-limit", "cpu", 64 << 20, 64 << 20},
		{"meta unlimited", "meta", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.Device.Name, cfg.Device.MemLimit = tc.device, tc.memLimit
			dev, err := NewDevice(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := dev.Memory().Capacity(); got != tc.want {
				t.Errorf("capacity %d, want %d", got, tc.want)
			}
			if tc.want == 0 {
				return
			}
			// Far beyond capacity: refused by the allocator before any
			// memory is touched.
			_, err = dev.Alloc(tc.want+1<<40, memory.Activation)
			var oom *memory.OOMError
			if !errors.As(err, &oom) {
				t.Errorf("allocating past capacity: %v, want a *memory.OOMError", err)
			}
		})
	}
}
