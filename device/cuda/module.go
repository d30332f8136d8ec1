//go:build cuda || cudaemu

package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/memfit/memfit/internal/atomicfile"

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
// major.minor. On a GPU the PTX is also kept on disk (ptxFile), so that the
// next process skips NVRTC's seconds of compiling.
func compilePTX(major, minor int) (string, error) {
	key := fmt.Sprintf("%d.%d", major, minor)
	ptxCache.Lock()
	defer ptxCache.Unlock()
	if ptx, ok := ptxCache.byArch[key]; ok {
		return ptx, nil
	}
	file := ""
	if !Emulated { // the emulator keeps its own images (internal/cu)
		file = ptxFile(source(), nvrtcOptions(major, minor))
	}
	if file != "" {
		if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
			if ptxCache.byArch == nil {
				ptxCache.byArch = make(map[string]string)
			}
			ptxCache.byArch[key] = string(b)
			return string(b), nil
		}
	}
	prog, err := nvrtc.CreateProgram(source(), "kernels.cu")
	if err != nil {
		return "", fmt.Errorf("nvrtcCreateProgram: %w", err)
	}
	defer prog.Destroy()
	if err := prog.Compile(nvrtcOptions(major, minor)...); err != nil {
		log, _ := prog.GetLog()
		return "", fmt.Errorf("nvrtcCompileProgram for sm_%d%d: %w\n%s", major, minor, err, log)
	}
	ptx, err := prog.GetPTX()
	if err != nil {
		return "", fmt.Errorf("nvrtcGetPTX: %w", err)
	}
	if ptxCache.byArch == nil {
		ptxCache.byArch = make(map[string]string)
	}
	ptxCache.byArch[key] = ptx
	if file != "" {
		// A cache that cannot be written costs the next process a
		// compile, nothing else.
		_ = atomicfile.Write(file, func(w io.Writer) error { _, err := io.WriteString(w, ptx); return err })
	}
	return ptx, nil
}

// ptxFile is where the PTX of src compiled with opts is kept:
// $MEMFIT_CUDA_CACHE, else memfit/ptx in the user's cache directory, named
// by a hash of both; "" where there is no such directory.
func ptxFile(src string, opts []string) string {
	dir := os.Getenv("MEMFIT_CUDA_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(base, "memfit", "ptx")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	h := sha256.New()
	for _, s := range append([]string{src}, opts...) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:24]+".ptx")
}

// loadKernels compiles and loads the module and looks up every entry point.
func (d *Device) loadKernels() error {
	ptx, err := compilePTX(d.major, d.minor)
	if err != nil {
		return err
	}
	fns := make(map[string]cu.Function)
	err = d.w.do(func() error {
		mod, err := cu.LoadData(ptx)
		if err != nil {
			return fmt.Errorf("cuModuleLoadData: %w", err)
		}
		d.mod = mod
		for _, name := range kernelNames() {
			f, err := mod.Function(name)
			if err != nil {
				return fmt.Errorf("cuModuleGetFunction %s: %w", name, err)
			}
			fns[name] = f
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.fns = fns
	return nil
}

// kernel returns an entry point, compiling the kernels on first use.
func (d *Device) kernel(name string) cu.Function {
	d.modOnce.Do(func() { d.modErr = d.loadKernels() })
	if d.modErr != nil {
		panic(d.wrap("compile kernels", d.modErr))
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
	d.must("launch "+name, d.w.do(func() error { return launch(f, grid, d.compute, a) }))
}
