// Package report draws what a memory.Allocator knows: a timeline of
// allocated bytes by category over the recorded event history (stacked
// areas, reserved bytes as a line, step boundaries, failed allocations and
// the peak with what was live at that moment, by creation site), the
// segment map and the summary.
//
// Three formats: "svg", a plain SVG picture; "html", one self-contained page
// with the same picture, details of the allocator's state under the mouse
// and the text below it, loading nothing from the network; and "txt", the
// summary, the segment map and the timeline in words. [WriteFile] picks the
// format from the file's extension and writes atomically: it is the helper
// for the train command's -mem-report flag.
//
// The timeline needs the allocator's history, which is off by default:
//
//	a := dev.Memory()
//	a.EnableHistory(1 << 20)   // the last million events
//	tensor.EnableAllocSites(a) // name the code that asked for each block
//	... train, calling a.SetStep(step) at each step ...
//	err := report.WriteFile("memory.html", a)
//
// Without history the picture says so, and the text still holds the
// summary and the segment map.
package report
