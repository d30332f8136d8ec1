//go:build cuda || cudaemu

package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/internal/atomicfile"
)

// kernelCache is the directory where compiled kernels are kept between
// processes: $MEMFIT_CUDA_CACHE, else memfit/cuda in the user's cache
// directory. Each entry is one file named by a hash of everything that
// made it (the source, NVRTC's options, and for the GPU's code the
// architecture and the driver's version), written whole or not at all
// (atomicfile: concurrent processes each write their own temporary file
// and rename it), and it carries a hash of its contents, so that a file
// damaged on disk is a miss, not a crash in the driver. A cache that
// cannot be read or written costs a compile, nothing else.
type kernelCache struct{ dir string }

// openKernelCache returns the cache, or one that keeps nothing where no
// directory can be had.
func openKernelCache() kernelCache {
	dir := os.Getenv("MEMFIT_CUDA_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return kernelCache{}
		}
		dir = filepath.Join(base, "memfit", "cuda")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return kernelCache{}
	}
	return kernelCache{dir: dir}
}

// name is the file of the entry of kind (its extension) made from src
// with opts; "" when the cache keeps nothing.
func (c kernelCache) name(kind, src string, opts ...string) string {
	if c.dir == "" {
		return ""
	}
	h := sha256.New()
	for _, s := range append([]string{kind, src}, opts...) {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return filepath.Join(c.dir, hex.EncodeToString(h.Sum(nil))[:24]+"."+kind)
}

// cacheMagic starts every entry, before the hash of what follows it.
const cacheMagic = "memfit kernel cache 1\n"

// get returns the entry in file, false when there is none or it is not
// whole.
func (c kernelCache) get(file string) (string, bool) {
	if file == "" {
		return "", false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", false
	}
	rest, ok := bytes.CutPrefix(b, []byte(cacheMagic))
	if !ok || len(rest) < sha256.Size {
		return "", false
	}
	sum, body := rest[:sha256.Size], rest[sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) || len(body) == 0 {
		return "", false
	}
	return string(body), true
}

// put stores image in file, or does nothing when it cannot.
func (c kernelCache) put(file, image string) {
	if file == "" || image == "" {
		return
	}
	sum := sha256.Sum256([]byte(image))
	_ = atomicfile.Write(file, func(w io.Writer) error {
		if _, err := io.WriteString(w, cacheMagic); err != nil {
			return err
		}
		if _, err := w.Write(sum[:]); err != nil {
			return err
		}
		_, err := io.WriteString(w, image)
		return err
	})
}
