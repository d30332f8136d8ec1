package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"
)

// A panic is a bug in memfit, never the user's input: it exits with
// status 3 (bad input is 2, a failure while running 1) and leaves its
// stack in a file. A panic in run's goroutine is recovered here; one in
// any other goroutine (a kernel's worker, the data loader) ends the
// process, and the supervising parent (supervise) reports it the same
// way from the runtime's crash output.

// exitInternal is the exit status of an internal error.
const exitInternal = 3

// internalError turns a panic that reached run into exit status 3.
func internalError(code *int, stderr io.Writer) {
	r := recover()
	if r == nil {
		return
	}
	stack := fmt.Sprintf("panic: %v\n\n%s", r, debug.Stack())
	*code = reportInternal(stderr, fmt.Sprint(r), stack)
}

// reportInternal writes the stack to a file and says so; where no file
// can be written, the stack goes to stderr.
func reportInternal(stderr io.Writer, what, stack string) int {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("memfit-panic-%d-%s.txt", os.Getpid(), time.Now().Format("20060102-150405")))
	if err := os.WriteFile(path, []byte(stack), 0o644); err != nil {
		fmt.Fprintf(stderr, "train: internal error (a bug in memfit, not in your input): %s\n%s", what, stack)
		return exitInternal
	}
	fmt.Fprintf(stderr, "train: internal error (a bug in memfit, not in your input): %s; the stack is in %s (please report it)\n", what, path)
	return exitInternal
}
