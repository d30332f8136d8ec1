//go:build cuda || cudaemu

package cuda

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/memfit/memfit/device/cuda/internal/cu"
	"github.com/memfit/memfit/device/cuda/internal/nvrtc"
)

// ptxCache keeps the PTX of kernels.cu per compute capability, so that a
// second device of the same kind does not compile again.
var ptxCache struct {
	sync.Mutex
	byArch map[string]string
}

// compilePTX compiles the kernel source with NVRTC for compute capability
// major.minor, or takes the PTX from the disk cache (kernelCache): NVRTC
// takes seconds over kernels.cu (26 s on an H100's host). fresh skips the
// caches, for an image that turned out not to load.
func compilePTX(major, minor int, fresh bool) (string, error) {
	key := fmt.Sprintf("%d.%d", major, minor)
	ptxCache.Lock()
	defer ptxCache.Unlock()
	if ptx, ok := ptxCache.byArch[key]; ok && !fresh {
		return ptx, nil
	}
	opts := nvrtcOptions(major, minor)
	c := openKernelCache()
	name := c.name("ptx", source(), opts...)
	ptx, ok := "", false
	if !fresh {
		ptx, ok = c.get(name)
	}
	if !ok {
		prog, err := nvrtc.CreateProgram(source(), "kernels.cu")
		if err != nil {
			return "", fmt.Errorf("nvrtcCreateProgram: %w", err)
		}
		defer prog.Destroy()
		if err := prog.Compile(opts...); err != nil {
			log, _ := prog.GetLog()
			return "", fmt.Errorf("nvrtcCompileProgram for sm_%d%d: %w\n%s", major, minor, err, log)
		}
		if ptx, err = prog.GetPTX(); err != nil {
			return "", fmt.Errorf("nvrtcGetPTX: %w", err)
		}
		c.put(name, ptx)
	}
	if ptxCache.byArch == nil {
		ptxCache.byArch = make(map[string]string)
	}
	ptxCache.byArch[key] = ptx
	return ptx, nil
}

// loadKernels loads the module and looks up every entry point. The GPU's
// code (cu.Link: the driver's JIT of the PTX, 22 s on an H100) is kept
// in the disk cache under the source, the options, the architecture and
// the driver's version, so that a new process loads it without compiling
// anything. A cached image that does not load, or PTX that does not link,
// is compiled again from the source.
func (d *Device) loadKernels() error {
	c := openKernelCache()
	name := cubinName(c, d.major, d.minor)
	if img, ok := c.get(name); ok {
		t := time.Now()
		if err := d.loadModule(img); err == nil {
			d.modLoad = ModuleLoad{Cached: true, Load: time.Since(t)}
			return nil
		}
	}
	var err error
	for _, fresh := range []bool{false, true} {
		var ml ModuleLoad
		t := time.Now()
		var ptx string
		if ptx, err = compilePTX(d.major, d.minor, fresh); err != nil {
			return err
		}
		ml.Compile = time.Since(t)
		t = time.Now()
		var img string
		err = d.w.do(func() error {
			var err error
			img, err = cu.Link(ptx)
			return err
		})
		if err != nil {
			err = fmt.Errorf("cuLinkComplete: %w", err)
			continue // cached PTX that does not link: compile it again
		}
		ml.Link = time.Since(t)
		t = time.Now()
		if err = d.loadModule(img); err != nil {
			continue
		}
		ml.Load = time.Since(t)
		c.put(name, img)
		d.modLoad = ml
		return nil
	}
	return err
}

// cubinName is the cache's entry for the GPU's code of the kernels for
// compute capability major.minor under this driver.
func cubinName(c kernelCache, major, minor int) string {
	return c.name("cubin", source(), append(nvrtcOptions(major, minor), fmt.Sprintf("sm_%d%d", major, minor), fmt.Sprintf("driver=%d", cu.DriverVersion()))...)
}

// loadModule loads a module image and looks up every kernel in it.
func (d *Device) loadModule(img string) error {
	fns := make(map[string]cu.Function)
	err := d.w.do(func() error {
		mod, err := cu.LoadData(img)
		if err != nil {
			return fmt.Errorf("cuModuleLoadData: %w", err)
		}
		for _, name := range kernelNames() {
			f, err := mod.Function(name)
			if err != nil {
				return fmt.Errorf("cuModuleGetFunction %s: %w", name, errors.Join(err, mod.Unload()))
			}
			fns[name] = f
		}
		d.mod = mod
		return nil
	})
	if err != nil {
		return err
	}
	d.fns = fns
	return nil
}

// ModuleLoad says how the kernels were loaded, loading them first if no
// kernel has run yet.
func (d *Device) ModuleLoad() ModuleLoad {
	_ = d.LoadKernels()
	return d.modLoad
}

// LoadKernels compiles (or takes from the cache) and loads the kernels
// now rather than at the first kernel's launch; later calls return the
// first's error.
func (d *Device) LoadKernels() error {
	d.modOnce.Do(func() { d.modErr = d.loadKernels() })
	return d.modErr
}

// kernel returns an entry point, compiling the kernels on first use.
func (d *Device) kernel(name string) cu.Function {
	if err := d.LoadKernels(); err != nil {
		panic(d.wrap("compile kernels", err))
	}
	f, ok := d.fns[name]
	if !ok {
		panic(d.wrap("kernel "+name, fmt.Errorf("no such kernel")))
	}
	return f
}

// launch runs kernel name over grid blocks of the package's block size on
// the compute stream.
func (d *Device) launch(name string, grid int, a *args) {
	if grid <= 0 {
		return
	}
	f := d.kernel(name)
	d.must("launch "+name, d.w.do(func() error {
		return d.timed(name, d.compute, func() error { return launch(f, grid, d.compute, a) })
	}))
}
