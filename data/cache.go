package data

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/internal/atomicfile"
)

// CacheEnv names the environment variable that overrides the directory
// where decompressed copies of gzip files are kept.
const CacheEnv = "MEMFIT_CACHE"

// Option configures the file-backed datasets.
type Option func(*options)

type options struct {
	cacheDir string
}

// CacheDir keeps decompressed copies of gzip-compressed files in dir,
// overriding $MEMFIT_CACHE and the user cache directory.
func CacheDir(dir string) Option { return func(o *options) { o.cacheDir = dir } }

func applyOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func (o options) dir() (string, error) {
	if o.cacheDir != "" {
		return o.cacheDir, nil
	}
	if d := os.Getenv(CacheEnv); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set $%s): %w", CacheEnv, err)
	}
	return filepath.Join(d, "memfit", "data"), nil
}

// isGzip reports whether f starts with the gzip magic bytes.
func isGzip(f io.ReaderAt) bool {
	var m [2]byte
	n, _ := f.ReadAt(m[:], 0)
	return n == 2 && m[0] == 0x1f && m[1] == 0x8b
}

// gunzipCached returns the path of a decompressed copy of the gzip file f
// (named path), making it first when the cache lacks a sound one. The
// copy is named by the SHA-256 of the compressed bytes; a sidecar (the
// copy's name + ".sum") records the copy's size and CRC-32C. Both are
// written atomically (temporary file, fsync, rename), the sidecar last, so
// concurrent or interrupted runs never see a partial file, and every use
// checks the copy against its sidecar: a copy truncated or damaged since,
// or one whose sidecar never got written, is rebuilt rather than failing
// every later run or being read as data. Memory use is constant; the
// check reads the copy once (CRC-32C runs at several GB/s).
func gunzipCached(f *os.File, path string, o options) (string, error) {
	dir, err := o.dir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return "", fmt.Errorf("read: %w", err)
	}
	target := filepath.Join(dir, "gunzip-"+hex.EncodeToString(h.Sum(nil)))
	if cacheSound(target) {
		return target, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	zr, err := gzip.NewReader(bufio.NewReader(io.NewSectionReader(f, 0, 1<<62)))
	if err != nil {
		return "", fmt.Errorf("gzip: %w", err)
	}
	crc := crc32.New(castagnoli)
	var size int64
	err = writeAtomic(target, func(w io.Writer) error {
		bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<20)
		n, err := io.Copy(bw, zr)
		if err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		if err := zr.Close(); err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		size = n
		return bw.Flush()
	})
	if err != nil {
		return "", err
	}
	sum := fmt.Sprintf(sumFormat, size, crc.Sum32())
	if err := writeAtomic(target+".sum", func(w io.Writer) error {
		_, err := io.WriteString(w, sum)
		return err
	}); err != nil {
		return "", err
	}
	return target, nil
}

// sumFormat is the sidecar's one line: the copy's size and CRC-32C.
const sumFormat = "size %d crc32c %08x\n"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// cacheSound reports whether target is a regular file whose size and
// CRC-32C are those its sidecar records.
func cacheSound(target string) bool {
	b, err := os.ReadFile(target + ".sum")
	if err != nil {
		return false
	}
	var size int64
	var sum uint32
	if _, err := fmt.Sscanf(string(b), sumFormat, &size, &sum); err != nil {
		return false
	}
	st, err := os.Stat(target)
	if err != nil || !st.Mode().IsRegular() || st.Size() != size {
		return false // checked before opening: a FIFO would block
	}
	f, err := os.Open(target)
	if err != nil {
		return false
	}
	defer f.Close()
	crc := crc32.New(castagnoli)
	n, err := io.Copy(crc, f)
	return err == nil && n == size && crc.Sum32() == sum
}

// writeAtomic writes target through atomicfile (a synced temporary file
// renamed over it). write gets the temporary *os.File, so a shard writer
// may fill its header with WriteAt; write's errors come back as they are,
// the file steps' with "cache:" before them.
func writeAtomic(target string, write func(io.Writer) error) error {
	var werr error
	err := atomicfile.Write(target, func(w io.Writer) error {
		werr = write(w)
		return werr
	})
	if err != nil && err != werr {
		return fmt.Errorf("cache: %w", err)
	}
	return err
}
