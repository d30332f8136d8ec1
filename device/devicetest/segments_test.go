package devicetest_test

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
	"github.com/memfit/memfit/device/meta"
)

// TestSegments checks the CPU's attention with example boundaries against
// itself on one thread and against each example alone, and the meta
// device's accounting of their workspace.
func TestSegments(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { devicetest.RunSegments(t, cpu.New(), cpu.New(cpu.Threads(1))) })
	t.Run("meta", func(t *testing.T) { devicetest.RunSegmentsAccounting(t, cpu.New(), meta.New(0)) })
	t.Run("composed skips", func(t *testing.T) { devicetest.RunSegments(t, cpu.New(), device.Without(cpu.New())) })
}
