package train

import (
	"io"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/memory/report"
)

// WriteMemoryReport writes the allocator's timeline and summary to path as
// .html, .svg or .txt (chosen by extension): a regular file is replaced
// whole, a link's target written, a stream written through (WriteOutput).
func WriteMemoryReport(path string, a *memory.Allocator) error {
	format, err := report.FormatOf(path)
	if err != nil {
		return err
	}
	return WriteOutput(path, Streamable, func(w io.Writer) error { return report.Write(w, format, a) })
}
