package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// With MEMFIT_TRAIN_CRASH=goroutine this test binary is the train
// command whose work panics in a goroutine of its own (as a kernel's
// worker or the data loader would): the supervised child panics, its
// parent reports it.
func init() {
	mode := os.Getenv("MEMFIT_TRAIN_CRASH")
	if mode != "goroutine" && mode != "hang" {
		return
	}
	if os.Getenv(supervisedEnv) == "" {
		main()
	}
	supervise() // the child: crash output to the parent's file
	if mode == "hang" {
		time.Sleep(time.Minute) // until the test kills the supervisor
		os.Exit(0)
	}
	go func() {
		var s []int
		i := len(os.Args) + 7
		s[i]++ // a bug: an index out of range
	}()
	time.Sleep(time.Minute) // the panic ends the process first
	os.Exit(0)
}

// TestPanicInGoroutineIsInternalError: a panic outside run's goroutine
// ends the command with status 3 (never 2, bad input's), saying it is a
// bug and where its stack is.
func TestPanicInGoroutineIsInternalError(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-quiet")
	cmd.Env = append(os.Environ(), "MEMFIT_TRAIN_CRASH=goroutine")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitInternal {
		t.Fatalf("%v, want exit status %d; stderr:\n%s", err, exitInternal, stderr.String())
	}
	m := regexp.MustCompile(`internal error \(a bug in memfit, not in your input\): (.*); the stack is in (\S+)`).FindStringSubmatch(stderr.String())
	if m == nil || !strings.Contains(m[1], "index out of range") {
		t.Fatalf("stderr does not name the panic and its stack file:\n%s", stderr.String())
	}
	stack, err := os.ReadFile(m[2])
	if err != nil || !strings.Contains(string(stack), "goroutine") {
		t.Errorf("the stack file %s: %v\n%s", m[2], err, stack)
	}
	os.Remove(m[2])
}

// TestPanicInRunIsInternalError: a panic in run's goroutine is recovered
// into status 3 with the stack in a file.
func TestPanicInRunIsInternalError(t *testing.T) {
	var stderr bytes.Buffer
	code := func() (code int) {
		defer internalError(&code, &stderr)
		var p *struct{ x int }
		return p.x // a bug: nil dereference
	}()
	if code != exitInternal {
		t.Fatalf("status %d, want %d", code, exitInternal)
	}
	m := regexp.MustCompile(`the stack is in (\S+)`).FindStringSubmatch(stderr.String())
	if !strings.Contains(stderr.String(), "nil pointer dereference") || m == nil {
		t.Fatalf("stderr: %s", stderr.String())
	}
	if b, err := os.ReadFile(m[1]); err != nil || !strings.Contains(string(b), "internal_test.go") {
		t.Errorf("the stack file %s: %v", m[1], err)
	}
	os.Remove(m[1])
}

// TestKilledSupervisorLeavesNoCrashFile: the crash report's file is
// unlinked as soon as it is made, so a supervisor killed mid-run (its
// child with it) leaves nothing in the temporary directory.
func TestKilledSupervisorLeavesNoCrashFile(t *testing.T) {
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-quiet")
	cmd.Env = append(os.Environ(), "MEMFIT_TRAIN_CRASH=hang", "TMPDIR="+tmp)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the supervisor has made the file and started the child
	cmd.Process.Kill()
	cmd.Wait()
	time.Sleep(100 * time.Millisecond)
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("a killed run left %v in the temporary directory", left)
	}
}
