package device_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	_ "github.com/memfit/memfit/device/cpu"
	_ "github.com/memfit/memfit/device/meta"
)

func TestRegistry(t *testing.T) {
	for _, name := range []string{"cpu", "meta"} {
		if !slices.Contains(device.Names(), name) {
			t.Errorf("%s is not registered: %v", name, device.Names())
		}
		d, err := device.Open(name, device.Options{Capacity: 1 << 20})
		if err != nil {
			t.Fatalf("Open(%q): %v", name, err)
		}
		if d.Name() != name || d.Memory().Capacity() != 1<<20 {
			t.Errorf("Open(%q) made %s with capacity %d", name, d.Name(), d.Memory().Capacity())
		}
	}
	if _, err := device.Open("tpu", device.Options{}); err == nil || !strings.Contains(err.Error(), "cpu, meta") {
		t.Errorf("Open of an unregistered device: %v, want an error listing the registered ones", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering cpu twice did not panic")
		}
	}()
	device.Register("cpu", func(device.Options) (device.Device, error) { return nil, nil })
}
