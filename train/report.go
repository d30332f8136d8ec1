package train

import (
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/memory/report"
)

// WriteMemoryReport writes the allocator's timeline and summary to path as
// .html, .svg or .txt (chosen by extension), atomically.
func WriteMemoryReport(path string, a *memory.Allocator) error {
	return report.WriteFile(path, a)
}
