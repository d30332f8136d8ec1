package data

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
// (named path), making it first when the cache lacks it. The copy is named
// by the SHA-256 of the compressed bytes and written atomically (temporary
// file, fsync, rename), so concurrent or interrupted runs never see a
// partial file. Memory use is constant.
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
	if st, err := os.Stat(target); err == nil && st.Mode().IsRegular() {
		return target, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".gunzip-*.tmp")
	if err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	zr, err := gzip.NewReader(bufio.NewReader(io.NewSectionReader(f, 0, 1<<62)))
	if err != nil {
		return "", fmt.Errorf("gzip: %w", err)
	}
	w := bufio.NewWriterSize(tmp, 1<<20)
	if _, err := io.Copy(w, zr); err != nil {
		return "", fmt.Errorf("gzip: %w", err)
	}
	if err := zr.Close(); err != nil {
		return "", fmt.Errorf("gzip: %w", err)
	}
	if err := w.Flush(); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	ok = true
	return target, nil
}
