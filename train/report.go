package train

import (
	"github.com/memfit/memfit/internal/procmem"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/memory/report"
)

// WriteMemoryReport writes the allocator's timeline and summary to path as
// .html, .svg or .txt (chosen by extension), atomically. The summary shows
// the process's resident set (now and at its peak) beside the allocator's
// allocated and reserved bytes, where the system reports it.
func WriteMemoryReport(path string, a *memory.Allocator) error {
	s := a.Snapshot()
	if rss, ok := procmem.RSS(); ok {
		s.RSS = rss
	}
	if peak, ok := procmem.PeakRSS(); ok {
		s.PeakRSS = peak
	}
	return report.WriteSnapshotFile(path, s)
}
