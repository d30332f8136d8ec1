package procmem

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// statusPath is the kernel's account of this process; tests point it
// elsewhere.
var statusPath = "/proc/self/status"

// PeakRSS returns the process's peak resident set size in bytes (VmHWM in
// /proc/self/status) since it started or since the last ResetPeakRSS. ok
// is false where the system does not say (not Linux, /proc not mounted).
func PeakRSS() (n int64, ok bool) { return statusField("VmHWM:") }

// RSS returns the process's resident set size in bytes now (VmRSS).
func RSS() (n int64, ok bool) { return statusField("VmRSS:") }

// ResetPeakRSS makes the peak resident set start again from the current one
// (Linux: writing "5" to /proc/self/clear_refs), so that one run inside a
// longer-lived process, such as a test binary, can be measured on its own.
// It reports whether the reset happened.
func ResetPeakRSS() bool {
	f, err := os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	_, err = f.Write([]byte("5"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err == nil
}

// statusField reads one "Name:   1234 kB" line of the status file.
func statusField(name string) (int64, bool) {
	b, err := os.ReadFile(statusPath)
	if err != nil {
		return 0, false
	}
	return parseStatus(b, name)
}

func parseStatus(b []byte, name string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		rest, found := bytes.CutPrefix(line, []byte(name))
		if !found {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil || kb < 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
