package train

import (
	"sync/atomic"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
)

// pinnedDevice is a CPU device that offers page-locked host memory, as a
// GPU does (device.HostMemory), counting what it hands out.
type pinnedDevice struct {
	device.Device
	allocs atomic.Int64
}

func (d *pinnedDevice) AllocHost(n int) ([]byte, error) {
	d.allocs.Add(1)
	return make([]byte, n), nil
}

func (d *pinnedDevice) FreeHost([]byte) error { return nil }

// TestOffloadHostMemoryUnderWithout: -offload's host memory comes from the
// device's pinned memory (device.HostMemory) also when -without hides some
// of the device's capabilities: device.Without keeps the device's other
// interfaces (device.As).
func TestOffloadHostMemoryUnderWithout(t *testing.T) {
	for _, without := range [][]string{nil, {"softmax"}, {"softmax", "attention"}} {
		pd := &pinnedDevice{Device: cpu.New()}
		var dev device.Device = pd
		if without != nil {
			dev = device.Without(dev, without...)
		}
		cfg := Default()
		cfg.Model.Layers, cfg.Model.Width, cfg.Optim.Batch, cfg.Optim.Steps = 1, 16, 8, 1
		cfg.Output.Quiet, cfg.Output.EvalEvery, cfg.Memory.Offload.Mode = true, 0, "all"
		tr, err := New(cfg, dev, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		if tr.Host().Memory().Stats().Reserved.Peak == 0 || pd.allocs.Load() == 0 {
			t.Errorf("-without %v: the host device reserved %d bytes, %d of them from the device's pinned memory", without,
				tr.Host().Memory().Stats().Reserved.Peak, pd.allocs.Load())
		}
		tr.Close()
	}
}
