package regularfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// NotRegularError says that a path names something other than a regular
// file. Open, Read and Stat return it inside an *fs.PathError, so that
// callers who name the path themselves can drop the wrapper.
type NotRegularError struct{ Mode fs.FileMode }

func (e *NotRegularError) Error() string { return Describe(e.Mode) + ", not a regular file" }

// TooLargeError says that a file holds more than the bytes its reader
// allows. Read returns it inside an *fs.PathError.
type TooLargeError struct {
	Size  int64 // the size seen; -1 when the file grew past Limit while being read
	Limit int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("over the limit of %s for this file", bytes(e.Limit))
	}
	return fmt.Sprintf("%d bytes, over the limit of %s for this file", e.Size, bytes(e.Limit))
}

// bytes writes n in the largest binary unit that divides it.
func bytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// kinds are the kinds of file that are not regular, in the order Describe
// tests them (a character device also has the device bit).
var kinds = []struct {
	bit  fs.FileMode
	name string
}{
	{fs.ModeDir, "a directory"},
	{fs.ModeNamedPipe, "a named pipe (FIFO)"},
	{fs.ModeSocket, "a socket"},
	{fs.ModeCharDevice, "a character device"},
	{fs.ModeDevice, "a device"},
	{fs.ModeSymlink, "a symbolic link"},
	{fs.ModeIrregular, "an irregular file"},
}

// Describe names the kind of file of mode m: "a directory", "a named pipe
// (FIFO)", "a character device", ...; "a regular file" for one.
func Describe(m fs.FileMode) string {
	if m.IsRegular() {
		return "a regular file"
	}
	for _, k := range kinds {
		if m&k.bit != 0 {
			return k.name
		}
	}
	return fmt.Sprintf("a file of mode %v", m)
}

// Stat is os.Stat (following links) that also fails, with a
// *NotRegularError, when path is not a regular file. It never opens path.
func Stat(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return st, &fs.PathError{Op: "open", Path: path, Err: &NotRegularError{st.Mode()}}
	}
	return st, nil
}

// Open opens path for reading if it is a regular file, and returns what
// the opened file's stat says.
func Open(path string) (*os.File, fs.FileInfo, error) {
	if _, err := Stat(path); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|nonBlocking, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = &fs.PathError{Op: "open", Path: path, Err: &NotRegularError{st.Mode()}}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// Read reads the regular file at path whole, refusing one of more than
// limit bytes (with a *TooLargeError) before reading it.
func Read(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Size: st.Size(), Limit: limit}}
	}
	// The file may have grown since the stat: read one byte more than
	// the limit to know.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Size: -1, Limit: limit}}
	}
	return b, nil
}
