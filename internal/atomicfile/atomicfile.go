package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Perm is the mode of the files Write creates: readable by all, as
// os.Create makes them under the usual umask (os.CreateTemp makes 0600).
const Perm = 0o644

// TempPattern is the os.CreateTemp pattern of the temporary file Write
// uses for path: "."+base+".tmp*" in path's directory.
func TempPattern(path string) string { return "." + filepath.Base(path) + ".tmp*" }

// Write replaces path with what write produces. write gets the temporary
// file itself (an *os.File, unbuffered: a writer may seek or WriteAt);
// the file is then made mode Perm, synced, closed and renamed over path,
// and the directory is synced. If write or any step fails, the temporary
// file is removed, path is untouched, and the error is returned: write's
// own error unchanged, so that callers can add their context.
func Write(path string, write func(w io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), TempPattern(path))
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	for _, step := range []func() error{func() error { return f.Chmod(Perm) }, f.Sync, f.Close} {
		if err := step(); err != nil {
			return err
		}
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	committed = true
	syncDir(filepath.Dir(path))
	return nil
}

// Rename moves a finished file at from over path durably: it syncs from's
// contents, renames it and syncs path's directory. from must be on path's
// file system (in the same directory, or one beside it), or the rename
// fails; from is left in place on error.
func Rename(from, path string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(from, path); err != nil {
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// syncDir makes a rename in dir durable. Not every system can sync a
// directory (and some file systems refuse), and the file is whole either
// way, so failures are ignored: only the rename's durability is at stake.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
