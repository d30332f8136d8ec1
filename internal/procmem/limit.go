package procmem

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Limit returns the bytes of memory this process may use at most: the
// machine's physical memory (MemTotal in /proc/meminfo), or its cgroup's
// limit (v2 memory.max, v1 memory.limit_in_bytes) when that is lower. ok is
// false where the system does not say (not Linux, /proc not mounted).
func Limit() (n int64, ok bool) {
	return limitUnder("/proc", "/sys/fs/cgroup")
}

// limitUnder is Limit with /proc and the cgroup mount at the given roots,
// for tests.
func limitUnder(proc, cgroup string) (int64, bool) {
	n, ok := memTotal(filepath.Join(proc, "meminfo"))
	if !ok {
		return 0, false
	}
	if c, ok := cgroupLimit(filepath.Join(proc, "self", "cgroup"), cgroup); ok && c < n {
		n = c
	}
	return n, true
}

// Available returns the bytes of memory the system could give this process
// now without swapping: MemAvailable of /proc/meminfo, or what is left
// under its cgroup's limit when that is less. Memory other processes hold
// is not there to take, so a device sized from Limit alone would let the
// kernel's out-of-memory killer, not memfit's error, end an over-size run.
func Available() (int64, bool) {
	return availableUnder("/proc", "/sys/fs/cgroup")
}

func availableUnder(proc, cgroup string) (int64, bool) {
	n, ok := meminfoField(filepath.Join(proc, "meminfo"), "MemAvailable:")
	if !ok {
		return 0, false
	}
	if limit, used, ok := cgroupUse(filepath.Join(proc, "self", "cgroup"), cgroup); ok && limit-used < n {
		n = max(limit-used, 0)
	}
	return n, true
}

// cgroupUse is the limit of this process's cgroup (cgroupLimit) and the
// usage beside it (memory.current, memory.usage_in_bytes).
func cgroupUse(self, root string) (limit, used int64, ok bool) {
	limit, ok = cgroupLimit(self, root)
	if !ok {
		return 0, 0, false
	}
	for _, p := range []string{filepath.Join(root, "memory.current"), filepath.Join(root, "memory", "memory.usage_in_bytes")} {
		if b, err := os.ReadFile(p); err == nil {
			if u, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && u >= 0 {
				return limit, u, true
			}
		}
	}
	return 0, 0, false
}

// memTotal reads the "MemTotal:  24684092 kB" line.
func memTotal(path string) (int64, bool) { return meminfoField(path, "MemTotal:") }

// meminfoField reads one "Key:  24684092 kB" line of /proc/meminfo.
func meminfoField(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, found := strings.CutPrefix(sc.Text(), key)
		if !found {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// cgroupLimit reads the memory limit of this process's cgroup and of the
// mount's root (a container sees its own cgroup as the root), taking the
// lowest that is set. "max" (v2) and v1's near-2^63 "unlimited" read as no
// limit.
func cgroupLimit(self, root string) (int64, bool) {
	var candidates []string
	if b, err := os.ReadFile(self); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			// hierarchy-ID:controllers:path; v2 is "0::path".
			parts := strings.SplitN(string(line), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				candidates = append(candidates, filepath.Join(root, parts[2], "memory.max"))
			case strings.Contains(","+parts[1]+",", ",memory,"):
				candidates = append(candidates, filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"))
			}
		}
	}
	candidates = append(candidates, filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
	best, ok := int64(0), false
	for _, p := range candidates {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(s, 10, 64)
		if s == "max" || err != nil || n <= 0 || n >= 1<<62 {
			continue
		}
		if !ok || n < best {
			best, ok = n, true
		}
	}
	return best, ok
}
