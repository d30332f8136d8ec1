package train

import (
	"io"

	"github.com/memfit/memfit/internal/procmem"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/memory/report"
)

// WriteMemoryReport writes the allocator's timeline and summary to path as
// .html, .svg or .txt (chosen by extension): a regular file is replaced
// whole, a link's target written, a stream written through (WriteOutput).
// The summary shows the process's resident set (now and at its peak)
// beside the allocator's allocated and reserved bytes, where the system
// reports it.
func WriteMemoryReport(path string, a *memory.Allocator) error {
	format, err := report.FormatOf(path)
	if err != nil {
		return err
	}
	s := a.Snapshot()
	if rss, ok := procmem.RSS(); ok {
		s.RSS = rss
	}
	if peak, ok := procmem.PeakRSS(); ok {
		s.PeakRSS = peak
	}
	return WriteOutput(path, Streamable, func(w io.Writer) error { return report.WriteSnapshot(w, format, s) })
}
