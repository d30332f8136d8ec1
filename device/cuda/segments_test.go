//go:build cuda || cudaemu

package cuda

import (
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/devicetest"
)

// TestAttentionSegments runs fused attention with example boundaries on
// the GPU and on the CPU device and compares them, each example also
// against itself alone (devicetest.RunSegments).
func TestAttentionSegments(t *testing.T) {
	d := newTestDevice(t)
	devicetest.RunSegments(t, cpu.New(), d)
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
