package data

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
)

// Error reports bad or unreadable input: the format that was being read
// ("idx", "shard", "corpus", "imagefolder", "data"), the file, the record
// when one is concerned, and the problem.
type Error struct {
	Format string // reader that failed
	Path   string // file or directory
	Record int    // record index within the file, or -1 when the file as a whole is at fault
	Err    error  // the problem
}

func (e *Error) Error() string {
	s := e.Format + ": "
	if e.Path != "" {
		s += e.Path + ": "
	}
	if e.Record >= 0 {
		s += "record " + strconv.Itoa(e.Record) + ": "
	}
	return s + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// fileErr makes an Error about a whole file.
func fileErr(format, path string, msg string, args ...any) *Error {
	return &Error{Format: format, Path: path, Record: -1, Err: fmt.Errorf(msg, args...)}
}

// recordErr makes an Error about record i of a file.
func recordErr(format, path string, i int, err error) *Error {
	return &Error{Format: format, Path: path, Record: i, Err: err}
}

// openErr describes a failure to open or stat path without repeating the
// path that Error already names.
func openErr(format, path string, err error) *Error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fileErr(format, path, "no such file or directory")
	}
	return &Error{Format: format, Path: path, Record: -1, Err: err}
}
