package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// With MEMFIT_TRAIN_MAIN=1 this test binary is the train command, main
// and all (its supervising parent, its signals), so that tests can run
// it as a process of its own (standard output and error then are what a
// user's redirection makes them) without building it.
func init() {
	if os.Getenv("MEMFIT_TRAIN_MAIN") == "1" {
		main()
	}
}

// A run whose output goes to files (not a terminal) writes no progress bar
// (\r redraws) anywhere, prints one line per evaluation on standard error,
// and says what the embedded task's accuracy means.
func TestOutputLinesWithoutTerminal(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-steps", "20", "-eval-every", "10", "-width", "32", "-layers", "1")
	cmd.Env = append(os.Environ(), "MEMFIT_TRAIN_MAIN=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("train: %v\n%s", err, stderr.String())
	}
	if strings.ContainsRune(stdout.String()+stderr.String(), '\r') {
		t.Errorf("a progress bar was written to a file:\nstdout %q\nstderr %q", stdout.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "step 10: eval loss ") || !strings.Contains(stderr.String(), ", accuracy ") {
		t.Errorf("no evaluation line on standard error:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "chance is 10%") {
		t.Errorf("the final lines do not say what the embedded task's accuracy means:\n%s", stdout.String())
	}
}
