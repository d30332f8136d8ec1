package tensor

import (
	"errors"
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// Error is the panic value of a tensor op given arguments it cannot use
// (shapes that do not match, a released tensor, backward through a graph
// already freed or modified in place). Catch turns it back into an error.
type Error struct {
	Op  string
	Msg string
}

func (e *Error) Error() string { return "tensor: " + e.Op + ": " + e.Msg }

func errorf(op, format string, args ...any) *Error {
	return &Error{Op: op, Msg: fmt.Sprintf(format, args...)}
}

// Catch runs fn and returns, as an error, any panic raised by a tensor op
// for a reason a user can cause: *Error (shapes, lifetimes, autograd
// misuse), *memory.OOMError (device full), *memory.InterruptError (the
// computation was interrupted) and *device.IndexError (an index outside
// its table). Other panics are bugs and propagate. Training steps
// run inside Catch, which is what makes out-of-memory recoverable.
func Catch(fn func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		switch e := r.(type) {
		case *Error:
			err = e
		case *memory.OOMError:
			err = e
		case *memory.InterruptError:
			err = e
		case *device.IndexError:
			err = e
		default:
			panic(r)
		}
	}()
	return fn()
}

// IsOOM reports whether err is, or wraps, a device out-of-memory error.
func IsOOM(err error) bool {
	var oom *memory.OOMError
	return errors.As(err, &oom)
}
