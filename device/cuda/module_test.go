//go:build cuda || cudaemu

package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// TestKernelsLoadFromDiskCache: a device whose kernels are in the disk
// cache loads them without compiling or linking; an entry damaged on
// disk, or whole but not loadable, is compiled again and replaced, and
// the device works either way.
func TestKernelsLoadFromDiskCache(t *testing.T) {
	t.Setenv("MEMFIT_CUDA_CACHE", t.TempDir())
	first := newTestDevice(t)
	if err := first.LoadKernels(); err != nil {
		t.Fatal(err)
	}
	if ml := first.ModuleLoad(); ml.Cached {
		t.Fatalf("first load in an empty cache: %+v, want compiled", ml)
	}
	file := cubinName(openKernelCache(), first.major, first.minor)
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the linked image was not kept: %v", err)
	}
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		damage     func() // nil: the cache as the first device left it
		wantCached bool
	}{
		{"whole", nil, true},
		{"flipped byte", func() {
			b := append([]byte(nil), good...)
			b[len(b)-1] ^= 0x40
			writeFile(t, file, b)
		}, false},
		{"truncated", func() { writeFile(t, file, good[:len(good)/2]) }, false},
		{"not an image", func() {
			c := openKernelCache()
			c.put(file, "not a module image")
		}, false},
		{"empty", func() { writeFile(t, file, nil) }, false},
		{"no image, bad PTX", func() {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
			c := openKernelCache()
			c.put(c.name("ptx", source(), nvrtcOptions(first.major, first.minor)...), "not PTX")
			ptxCache.Lock()
			ptxCache.byArch = nil
			ptxCache.Unlock()
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.damage != nil {
				tc.damage()
			}
			d := newTestDevice(t)
			runOneKernel(t, d)
			if got := d.ModuleLoad().Cached; got != tc.wantCached {
				t.Errorf("loaded from the cache: %t, want %t (%+v)", got, tc.wantCached, d.ModuleLoad())
			}
			if b, err := os.ReadFile(file); err != nil || string(b) != string(good) {
				t.Errorf("the cache's entry afterwards differs from the good one (err %v)", err)
			}
		})
	}
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runOneKernel fills a buffer on d and reads it back.
func runOneKernel(t *testing.T, d *Device) {
	t.Helper()
	b, err := d.Alloc(16, memory.Activation)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(b)
	v := device.View{Buf: b, DType: device.F32, Shape: []int{4}, Strides: []int{1}}
	d.Fill(v, 2)
	got := make([]byte, 16)
	d.Read(got, b, 0)
	if got[3] != 0x40 { // 2.0f is 0x40000000
		t.Errorf("filled with 2, read back % x", got)
	}
}

// TestKernelCacheDirectory: entries are named by everything that made
// them, under $MEMFIT_CUDA_CACHE.
func TestKernelCacheDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("MEMFIT_CUDA_CACHE", dir)
	c := openKernelCache()
	a := c.name("ptx", "src", nvrtcOptions(9, 0)...)
	if filepath.Dir(a) != dir || filepath.Ext(a) != ".ptx" {
		t.Errorf("name = %s, want a .ptx file in %s", a, dir)
	}
	for _, b := range []string{c.name("ptx", "src2", nvrtcOptions(9, 0)...), c.name("ptx", "src", nvrtcOptions(8, 0)...), c.name("cubin", "src", nvrtcOptions(9, 0)...)} {
		if strings.TrimSuffix(b, filepath.Ext(b)) == strings.TrimSuffix(a, filepath.Ext(a)) {
			t.Errorf("another source, architecture or kind shares the entry %s", a)
		}
	}
}
