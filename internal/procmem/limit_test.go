package procmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestLimitUnder(t *testing.T) {
	const gib = 1 << 30
	meminfo := "MemTotal:       16777216 kB\nMemFree:         1000 kB\n" // 16 GiB
	cases := []struct {
		name   string
		files  map[string]string // relative to a temporary root
		want   int64
		wantOK bool
	}{
		{"no proc", map[string]string{}, 0, false},
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, 16 * gib, true},
		{"v2 limit lower", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "0::/job\n", "cg/job/memory.max": "2147483648\n"}, 2 * gib, true},
		{"v2 max", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "0::/job\n", "cg/job/memory.max": "max\n"}, 16 * gib, true},
		{"v2 limit higher", map[string]string{"proc/meminfo": meminfo, "cg/memory.max": "68719476736\n"}, 16 * gib, true},
		{"v1 limit", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "5:memory:/docker/x\n", "cg/memory/docker/x/memory.limit_in_bytes": "1073741824\n"}, gib, true},
		{"v1 unlimited", map[string]string{"proc/meminfo": meminfo, "cg/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 16 * gib, true},
		{"garbled meminfo", map[string]string{"proc/meminfo": "MemTotal: lots\n"}, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range c.files {
				p := filepath.Join(root, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n, ok := limitUnder(filepath.Join(root, "proc"), filepath.Join(root, "cg"))
			if n != c.want || ok != c.wantOK {
				t.Errorf("limitUnder = %d, %v; want %d, %v", n, ok, c.want, c.wantOK)
			}
		})
	}
}

func TestLimitOnThisMachine(t *testing.T) {
	n, ok := Limit()
	if runtime.GOOS == "linux" && (!ok || n <= 0) {
		t.Errorf("Limit() = %d, %v on Linux; want a positive size", n, ok)
	}
}

func TestAvailableUnder(t *testing.T) {
	const gib = 1 << 30
	meminfo := "MemTotal:       16777216 kB\nMemFree:         1000 kB\nMemAvailable:    8388608 kB\n" // 16 GiB, 8 available
	cases := []struct {
		name   string
		files  map[string]string
		want   int64
		wantOK bool
	}{
		{"no proc", map[string]string{}, 0, false},
		{"meminfo", map[string]string{"proc/meminfo": meminfo}, 8 * gib, true},
		{"no MemAvailable", map[string]string{"proc/meminfo": "MemTotal:       16777216 kB\n"}, 0, false},
		{"v2 room lower", map[string]string{"proc/meminfo": meminfo, "cg/memory.max": "4294967296\n", "cg/memory.current": "1073741824\n"}, 3 * gib, true},
		{"v2 room higher", map[string]string{"proc/meminfo": meminfo, "cg/memory.max": "68719476736\n", "cg/memory.current": "1073741824\n"}, 8 * gib, true},
		{"v2 over its limit", map[string]string{"proc/meminfo": meminfo, "cg/memory.max": "1073741824\n", "cg/memory.current": "2147483648\n"}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range c.files {
				p := filepath.Join(root, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n, ok := availableUnder(filepath.Join(root, "proc"), filepath.Join(root, "cg"))
			if n != c.want || ok != c.wantOK {
				t.Errorf("availableUnder = %d, %v; want %d, %v", n, ok, c.want, c.wantOK)
			}
		})
	}
}
