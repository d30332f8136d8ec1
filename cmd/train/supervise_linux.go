package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

// supervisedEnv marks the process supervise started.
const supervisedEnv = "MEMFIT_SUPERVISED"

// supervise runs the command in a child process of the same binary and
// reports the child's crash (a panic in any goroutine, or a fatal runtime
// error, which the Go runtime ends with status 2, the status of bad
// input) as an internal error, status 3, with the stack in a file.
// Signals the parent receives (SIGINT, SIGTERM) go to the child, which
// saves and stops; the child dies with the parent (a SIGKILL of the
// parent kills it too). It returns false in the child, under an MPI
// launcher (whose ranks must be the processes it started), and when the
// binary cannot be found: the command then runs in this process.
func supervise() (int, bool) {
	if os.Getenv(supervisedEnv) != "" {
		// The child: the runtime's crash report goes to the parent's
		// file (descriptor 3).
		debug.SetCrashOutput(os.NewFile(3, "crash output"), debug.CrashOptions{})
		return 0, false
	}
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" || os.Getenv("PMI_RANK") != "" || os.Getenv("PMIX_RANK") != "" {
		return 0, false
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, false
	}
	crash, err := os.CreateTemp("", "memfit-crash-*.txt")
	if err != nil {
		return 0, false
	}
	// Unlinked at once: the child writes through the descriptor, and a
	// supervisor killed before it could look leaves no empty file
	// behind. A crash's report is copied to a file of its own below.
	os.Remove(crash.Name())
	// Pdeathsig follows the thread that started the child: keep it.
	runtime.LockOSThread()
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), supervisedEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{crash}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if err := cmd.Start(); err != nil {
		signal.Stop(sigs)
		crash.Close()
		return 0, false
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	signal.Stop(sigs)
	defer crash.Close()
	if st, _ := crash.Stat(); st != nil && st.Size() > 0 {
		crash.Seek(0, 0)
		what := "the runtime's crash report"
		sc := bufio.NewScanner(crash)
		for sc.Scan() {
			// The report's first words: "panic: ..." or "fatal error: ...".
			if line := strings.TrimSpace(sc.Text()); line != "" {
				what = line
				break
			}
		}
		where := "stderr above"
		if kept, err := keepReport(crash); err == nil {
			where = kept
		}
		os.Stderr.WriteString("train: internal error (a bug in memfit, not in your input): " + what + "; the stack is in " + where + " (please report it)\n")
		return exitInternal, true
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return exit.ExitCode(), true
	}
	os.Stderr.WriteString("train: " + err.Error() + "\n")
	return 1, true
}

// keepReport copies a crash report (the unlinked file the child wrote)
// into a new file of the temporary directory and returns its name.
func keepReport(report *os.File) (string, error) {
	if _, err := report.Seek(0, 0); err != nil {
		return "", err
	}
	out, err := os.CreateTemp("", "memfit-crash-*.txt")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(out, report)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out.Name())
		return "", err
	}
	return out.Name(), nil
}
