package data

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGunzipCacheRebuilt damages the decompressed copy of a .gz IDX file
// in each way a disk or a crash can, and checks that the next open
// rebuilds it and reads the right pixels, while a sound copy is reused.
func TestGunzipCacheRebuilt(t *testing.T) {
	const n, h, w = 12, 3, 4
	dir := t.TempDir()
	images, labels := makeMNIST(t, dir, "train", n, h, w)
	for _, p := range []string{images, labels} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, p+".gz", gzipBytes(b))
	}
	raw, _ := os.ReadFile(images)
	cache := t.TempDir()
	open := func(t *testing.T) {
		t.Helper()
		ds, err := OpenIDXImages(images+".gz", labels+".gz", CacheDir(cache))
		if err != nil {
			t.Fatal(err)
		}
		defer ds.Close()
		for i := range n {
			ex, err := ds.Get(i)
			if err != nil {
				t.Fatal(err)
			}
			for j, v := range ex.(Image).Pixels {
				if v != float32(pixel(i, j))/255 {
					t.Fatalf("image %d pixel %d = %v, want %v", i, j, v, float32(pixel(i, j))/255)
				}
			}
		}
	}
	open(t)
	// The images' copy is the one as long as the uncompressed file.
	var copyPath string
	matches, _ := filepath.Glob(filepath.Join(cache, "gunzip-*"))
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && st.Size() == int64(len(raw)) {
			copyPath = m
		}
	}
	if copyPath == "" {
		t.Fatalf("no copy of %s among %v", images, matches)
	}

	cases := []struct {
		name    string
		damage  func(t *testing.T)
		rebuilt bool
	}{
		{"sound", func(t *testing.T) {}, false},
		{"truncated", func(t *testing.T) { os.Truncate(copyPath, int64(len(raw)/2)) }, true},
		{"empty", func(t *testing.T) { os.Truncate(copyPath, 0) }, true},
		{"bit flipped", func(t *testing.T) {
			b, _ := os.ReadFile(copyPath)
			b[len(b)-5] ^= 0x04 // a pixel: the header stays valid
			os.WriteFile(copyPath, b, 0o644)
		}, true},
		{"longer", func(t *testing.T) {
			os.WriteFile(copyPath, append(append([]byte{}, raw...), 0), 0o644)
		}, true},
		{"no sidecar (a crash before it was written)", func(t *testing.T) { os.Remove(copyPath + ".sum") }, true},
		{"garbled sidecar", func(t *testing.T) { os.WriteFile(copyPath+".sum", []byte("size x\n"), 0o644) }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, err := os.Stat(copyPath)
			if err != nil {
				t.Fatal(err)
			}
			c.damage(t)
			open(t)
			after, err := os.Stat(copyPath)
			if err != nil {
				t.Fatal(err)
			}
			if got := !os.SameFile(before, after); got != c.rebuilt {
				t.Errorf("copy rebuilt: %v, want %v", got, c.rebuilt)
			}
			if b, _ := os.ReadFile(copyPath); !bytes.Equal(b, raw) {
				t.Errorf("copy after the open: %d bytes, not the decompressed file (%d)", len(b), len(raw))
			}
		})
	}
	if tmps, _ := filepath.Glob(filepath.Join(cache, ".*")); len(tmps) > 0 {
		t.Errorf("temporary files left in the cache: %v", tmps)
	}
}
