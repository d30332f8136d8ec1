package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/memfit/memfit/memory"
)

// Rows of the text report's step table before and after the gap that a long
// run leaves out.
const (
	stepsHead = 5
	stepsTail = 45
)

// writeText writes the summary, the segment map and the timeline in words.
func writeText(w io.Writer, s memory.Snapshot, tl *Timeline) error {
	var b strings.Builder
	b.WriteString(s.Summary())
	b.WriteString("\n")
	b.WriteString(s.SegmentMap())
	b.WriteString("\n")
	timelineText(&b, tl)
	_, err := io.WriteString(w, b.String())
	return err
}

// timelineText describes the timeline: the peak, what held it, the failed
// allocations and allocated memory at the end of each step.
func timelineText(b *strings.Builder, tl *Timeline) {
	if len(tl.Events) == 0 {
		b.WriteString("memory timeline: no history recorded (call EnableHistory on the allocator to record one)\n")
		return
	}
	first, last := tl.Steps[0].Step, tl.Steps[len(tl.Steps)-1].Step
	fmt.Fprintf(b, "memory timeline: %d events recorded, steps %d to %d, over %v\n", len(tl.Events), first, last, roundDuration(tl.Duration()))
	p := tl.Peak
	fmt.Fprintf(b, "  peak: %s allocated after event %d (step %d), %s reserved; most reserved %s\n",
		memory.FormatBytes(p.Allocated), p.Index, p.Step, memory.FormatBytes(p.Reserved), memory.FormatBytes(tl.MaxReserved()))
	var cats []string
	for _, c := range byBytes(p.Point) {
		cats = append(cats, fmt.Sprintf("%s %s", c, memory.FormatBytes(p.Point.ByCategory[c])))
	}
	if len(cats) > 0 {
		fmt.Fprintf(b, "  at the peak, by category: %s\n", strings.Join(cats, ", "))
	}
	if len(p.Sites) > 0 {
		b.WriteString("  live at the peak, by creation site:\n")
	}
	for i, s := range p.Sites {
		if i == 2*maxSites {
			var rest int64
			for _, r := range p.Sites[i:] {
				rest += r.Bytes
			}
			fmt.Fprintf(b, "    ... %d more sites, %s\n", len(p.Sites)-i, memory.FormatBytes(rest))
			break
		}
		site := s.Site
		if site == "" {
			site = "(site unknown: allocated before history was on, or without a site function)"
		}
		blocks := "blocks"
		if s.Blocks == 1 {
			blocks = "block "
		}
		fmt.Fprintf(b, "    %10s  %-15s %5d %s  %s\n", memory.FormatBytes(s.Bytes), s.Category, s.Blocks, blocks, site)
	}
	for _, i := range tl.OOMs {
		e := tl.Events[i-1]
		fmt.Fprintf(b, "  out of memory at event %d (step %d): tried to reserve %s for %s\n", i, e.Step, memory.FormatBytes(e.Size), e.Category)
	}
	fmt.Fprintf(b, "  allocated memory by step:\n")
	fmt.Fprintf(b, "    %8s %14s %14s %14s\n", "step", "at its end", "its peak", "reserved")
	for i, sp := range tl.Steps {
		if len(tl.Steps) > stepsHead+stepsTail && i == stepsHead {
			fmt.Fprintf(b, "    %8s (%d steps left out)\n", "...", len(tl.Steps)-stepsHead-stepsTail)
		}
		if len(tl.Steps) > stepsHead+stepsTail && i >= stepsHead && i < len(tl.Steps)-stepsTail {
			continue
		}
		fmt.Fprintf(b, "    %8d %14s %14s %14s\n", sp.Step, memory.FormatBytes(sp.End), memory.FormatBytes(sp.Peak), memory.FormatBytes(sp.Reserved))
	}
}

// byBytes lists the categories that hold bytes at p, most first.
func byBytes(p Point) []memory.Category {
	var out []memory.Category
	for _, c := range stackOrder {
		if p.ByCategory[c] > 0 {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(x, y memory.Category) int { return cmp.Compare(p.ByCategory[y], p.ByCategory[x]) })
	return out
}

// roundDuration keeps three significant digits.
func roundDuration(d time.Duration) time.Duration {
	if d < 1000 {
		return d
	}
	unit := time.Duration(math.Pow(10, math.Floor(math.Log10(float64(d)))-2))
	return d.Round(unit)
}
