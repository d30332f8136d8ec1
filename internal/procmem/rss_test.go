package procmem

import (
	"path/filepath"
	"testing"
)

func TestParseStatus(t *testing.T) {
	status := []byte("Name:\ttest\nVmPeak:\t  200000 kB\nVmHWM:\t    1536 kB\nVmRSS:\t    1024 kB\nBad:\t12 MB\nNeg:\t-1 kB\n")
	for _, c := range []struct {
		field string
		want  int64
		ok    bool
	}{
		{"VmHWM:", 1536 << 10, true},
		{"VmRSS:", 1 << 20, true},
		{"VmSwap:", 0, false}, // absent
		{"Bad:", 0, false},    // not in kB
		{"Neg:", 0, false},
	} {
		got, ok := parseStatus(status, c.field)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %d, %v; want %d, %v", c.field, got, ok, c.want, c.ok)
		}
	}
}

func TestMissingStatus(t *testing.T) {
	old := statusPath
	statusPath = filepath.Join(t.TempDir(), "absent")
	defer func() { statusPath = old }()
	if n, ok := PeakRSS(); ok || n != 0 {
		t.Errorf("PeakRSS without a status file: %d, %v; want 0, false", n, ok)
	}
}
