//go:build cudaemu

package cu

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/memfit/memfit/internal/atomicfile"
)

var (
	//go:embed emu/api.h
	apiH string
	//go:embed emu/kernel.h
	kernelH string
)

// compileFlags are g++'s for a kernel module.
var compileFlags = []string{"-std=c++17", "-O1", "-fPIC", "-shared", "-fno-strict-aliasing", "-ffp-contract=off", "-w"}

var compileMu sync.Mutex

// CompileKernels compiles CUDA C++ source for the emulator, as NVRTC would
// compile it for a GPU, and returns the image LoadData loads (the path of a
// shared library, in a cache keyed by the source's hash) and g++'s log.
// It needs g++ (Debian's g++ package).
//
// Every extern "C" __global__ function becomes an entry point: a scan pass
// of the preprocessor finds them, and a trampoline per kernel unpacks the
// launch's parameter array into the kernel's arguments.
func CompileKernels(src, name string) (image, log string, err error) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		return "", "", fmt.Errorf("the CUDA emulator compiles kernels with g++, which is not installed (apt-get install g++): %w", err)
	}
	compileMu.Lock()
	defer compileMu.Unlock()
	h := sha256.New()
	for _, s := range append([]string{apiH, kernelH, src}, compileFlags...) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]
	dir, err := cacheDir()
	if err != nil {
		return "", "", err
	}
	so := filepath.Join(dir, key+".so")
	if _, err := os.Stat(so); err == nil {
		return imagePrefix + so, "", nil
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(work)
	for n, s := range map[string]string{"api.h": apiH, "kernel.h": kernelH, name: src} {
		if err := os.WriteFile(filepath.Join(work, n), []byte(s), 0o644); err != nil {
			return "", "", err
		}
	}
	// The scan pass: the preprocessed source with __global__ left as a
	// marker.
	var out, errs bytes.Buffer
	cmd := exec.Command(gxx, "-std=c++17", "-E", "-P", "-DMEMFIT_SCAN", "-x", "c++", "-include", "kernel.h", name)
	cmd.Dir, cmd.Stdout, cmd.Stderr = work, &out, &errs
	if err := cmd.Run(); err != nil {
		return "", errs.String(), fmt.Errorf("g++ -E %s: %w", name, err)
	}
	var entries []string
	for _, m := range globalRE.FindAllStringSubmatch(out.String(), -1) {
		entries = append(entries, m[1])
	}
	if len(entries) == 0 {
		return "", "", fmt.Errorf("%s defines no extern \"C\" __global__ kernel", name)
	}
	var b strings.Builder
	b.WriteString(src)
	b.WriteString("\n// Entry points added by the CUDA emulator.\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "extern \"C\" __attribute__((visibility(\"default\"))) void memfit_entry_%s(void** p) { memfit_invoke(%s, p); }\n", e, e)
	}
	full := filepath.Join(work, "module.cc")
	if err := os.WriteFile(full, []byte(b.String()), 0o644); err != nil {
		return "", "", err
	}
	tmp := filepath.Join(work, "module.so")
	args := append(append([]string{}, compileFlags...), "-include", "kernel.h", "-o", tmp, "module.cc")
	cmd = exec.Command(gxx, args...)
	cmd.Dir = work
	combined, err := cmd.CombinedOutput()
	if err != nil {
		return "", string(combined), fmt.Errorf("g++ %s: %w", name, err)
	}
	// Another test binary may be compiling the same module: each builds
	// in its own directory and the rename makes one whole image the
	// cache's, never a part of one.
	if err := atomicfile.Rename(tmp, so); err != nil {
		return "", "", err
	}
	return imagePrefix + so, string(combined), nil
}

var globalRE = regexp.MustCompile(`extern\s+"C"\s+MEMFIT_GLOBAL\s+void\s+(\w+)\s*\(`)

// cacheDir is where compiled modules are kept between test binaries:
// MEMFIT_CUDAEMU_CACHE, or memfit/cudaemu under the user's cache
// directory, or the temporary directory.
func cacheDir() (string, error) {
	dir := os.Getenv("MEMFIT_CUDAEMU_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "memfit", "cudaemu")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("CUDA emulator cache: %w", err)
	}
	return dir, nil
}
