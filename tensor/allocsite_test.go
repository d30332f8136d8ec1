package tensor_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

func TestEnableAllocSites(t *testing.T) {
	dev := cpu.New()
	a := dev.Memory()
	tensor.EnableAllocSites(a)
	defer a.SetSiteFunc(nil)
	off, _ := tensor.New(dev, tensor.F32, []int{4}, memory.Data) // history off: no site
	defer off.Release()

	a.EnableHistory(100)
	const file = "tensor/allocsite_test.go" // relative to the module, wherever it was built
	_, _, line, _ := runtime.Caller(0)
	x, _ := tensor.New(dev, tensor.F32, []int{8}, memory.Data)
	s := tensor.NewScope()
	y := s.Relu(s.Add(x, x))
	defer x.Release()
	defer s.Close()

	h := a.History()
	var sites []string
	for _, e := range h {
		if e.Kind == memory.EventAlloc {
			sites = append(sites, e.Site)
		}
	}
	want := []string{fmt.Sprintf("%s:%d", file, line+1), fmt.Sprintf("%s:%d", file, line+3), fmt.Sprintf("%s:%d", file, line+3)}
	if fmt.Sprint(sites) != fmt.Sprint(want) {
		t.Errorf("alloc sites %q, want %q", sites, want)
	}
	snap := a.Snapshot()
	if len(snap.Sites) != 3 {
		t.Errorf("snapshot sites %v, want the three blocks made with history on", snap.Sites)
	}
	_ = y
}

func BenchmarkAllocSite(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchAllocSite(b, false) })
	b.Run("on", func(b *testing.B) { benchAllocSite(b, true) })
}

func benchAllocSite(b *testing.B, on bool) {
	dev := cpu.New()
	a := dev.Memory()
	a.EnableHistory(1 << 10)
	if on {
		tensor.EnableAllocSites(a)
	}
	x, _ := tensor.New(dev, tensor.F32, []int{16}, memory.Data)
	defer x.Release()
	b.ReportAllocs()
	for b.Loop() {
		s := tensor.NewScope()
		s.Add(x, x)
		s.Close()
	}
}
