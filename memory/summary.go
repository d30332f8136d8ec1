package memory

import (
	"fmt"
	"strconv"
	"strings"
)

// summaryOrder is the order of category rows in Summary.
var summaryOrder = [NumCategories]Category{Parameter, Gradient, OptimizerState, Activation, Temporary, Data, KVCache, Other}

const summaryInner = 81 // characters between the outer bars of Summary's table

// Summary renders the statistics as a table in the manner of
// torch.cuda.memory_summary: current, peak and running totals of each byte
// stat, requested bytes per category, block and segment counts, and the
// event counters.
func (a *Allocator) Summary() string { return summary(a.Device(), a.Capacity(), a.Stats(), 0, 0) }

// Summary renders the snapshot's statistics as Allocator.Summary does.
// When the snapshot carries the process's resident set, a row shows it
// under the allocator's.
func (s Snapshot) Summary() string {
	return summary(s.Device, s.Capacity, s.Stats, s.RSS, s.PeakRSS)
}

func summary(device string, capacityBytes int64, s Stats, rss, peakRSS int64) string {
	capacity := "unlimited capacity"
	if capacityBytes > 0 {
		capacity = "capacity " + FormatBytes(capacityBytes)
	}
	var b strings.Builder
	rule := func(c byte) { b.WriteString("|" + strings.Repeat(string(c), summaryInner) + "|\n") }
	text := func(t string) { fmt.Fprintf(&b, "| %-*s |\n", summaryInner-2, t) }
	row := func(name string, v [4]string) {
		fmt.Fprintf(&b, "| %-23s | %11s | %11s | %11s | %11s |\n", name, v[0], v[1], v[2], v[3])
	}
	bytesRow := func(name string, st Stat) {
		row(name, [4]string{FormatBytes(st.Current), FormatBytes(st.Peak), FormatBytes(st.Allocated), FormatBytes(st.Freed)})
	}
	countRow := func(name string, st Stat) {
		f := func(n int64) string { return strconv.FormatInt(n, 10) }
		row(name, [4]string{f(st.Current), f(st.Peak), f(st.Allocated), f(st.Freed)})
	}

	title := fmt.Sprintf("memfit memory summary: device %s, %s", device, capacity)
	pad := max(summaryInner-len(title), 0)
	rule('=')
	b.WriteString("|" + strings.Repeat(" ", pad/2) + title + strings.Repeat(" ", pad-pad/2) + "|\n")
	rule('=')
	row("Metric", [4]string{"Current", "Peak", "Tot alloc", "Tot freed"})
	rule('-')
	bytesRow("Allocated memory", s.Allocated)
	bytesRow("Requested memory", s.Requested)
	bytesRow("Reserved memory", s.Reserved)
	bytesRow("Active memory", s.Active)
	bytesRow("Non-releasable memory", s.InactiveSplit)
	if peakRSS > 0 {
		// What the operating system saw: reserved bytes plus the Go
		// runtime, the binary and host-side buffers.
		row("Process RSS (OS)", [4]string{FormatBytes(rss), FormatBytes(peakRSS), "", ""})
	}
	rule('-')
	row("Requested by category", [4]string{})
	for _, c := range summaryOrder {
		bytesRow("  "+c.String(), s.ByCategory[c])
	}
	rule('-')
	countRow("Live blocks", s.LiveBlocks)
	countRow("Segments", s.Segments)
	rule('-')
	text(fmt.Sprintf("Allocs: %d   Frees: %d   Cache hits: %d   Raw allocs: %d   Raw frees: %d",
		s.Allocs, s.Frees, s.CacheHits, s.RawAllocs, s.RawFrees))
	text(fmt.Sprintf("Retries: %d   OOMs: %d", s.Retries, s.OOMs))
	rule('=')
	return b.String()
}
