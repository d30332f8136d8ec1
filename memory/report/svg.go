package report

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/memfit/memfit/memory"
)

// The chart's geometry, in SVG user units.
const (
	chartW         = 1200
	chartH         = 720
	plotLeft       = 96
	plotRight      = 880
	plotTop        = 84
	plotBottom     = 652
	panelLeft      = 908
	maxSites       = 10  // sites listed beside the chart
	maxSamples     = 784 // one per unit of plot width
	stepLabelPx    = 44  // least room between two step labels set across
	uprightLabelPx = 11  // least room between two upright step numbers
)

// chart draws a Timeline as SVG.
type chart struct {
	tl          *Timeline
	samples     []sample
	cats        []memory.Category // drawn categories, bottom first
	top         int64             // value at the top of the plot
	ticks       []int64
	unit        int64
	unitName    string
	interactive bool // for the HTML page: ids for the script, no namespace
}

func newChart(tl *Timeline, interactive bool) *chart {
	c := &chart{tl: tl, samples: tl.sample(maxSamples), interactive: interactive}
	var most [memory.NumCategories]int64
	for _, p := range tl.Points {
		for i, b := range p.ByCategory {
			most[i] = max(most[i], b)
		}
	}
	for _, cat := range stackOrder {
		if most[cat] > 0 {
			c.cats = append(c.cats, cat)
		}
	}
	top := max(tl.Peak.Allocated, tl.MaxReserved(), 1)
	// Show the device's capacity when it is near enough to matter.
	if tl.Capacity > 0 && float64(tl.Capacity) <= 1.5*float64(top) {
		top = max(top, tl.Capacity)
	}
	c.ticks, c.unit, c.unitName = byteTicks(top, 8)
	c.top = c.ticks[len(c.ticks)-1]
	return c
}

// x is the left edge of point i's column.
func (c *chart) x(i int) float64 {
	return plotLeft + float64(plotRight-plotLeft)*float64(i)/float64(len(c.tl.Points))
}

func (c *chart) y(v int64) float64 {
	return plotBottom - float64(plotBottom-plotTop)*float64(v)/float64(c.top)
}

// svgWriter collects SVG text.
type svgWriter struct{ strings.Builder }

func (w *svgWriter) f(format string, args ...any) { fmt.Fprintf(w, format, args...) }

// text writes a text element; s is escaped.
func (w *svgWriter) text(x, y float64, attrs, s string) {
	w.f(`<text x="%.1f" y="%.1f" %s>%s</text>`+"\n", x, y, attrs, html.EscapeString(s))
}

// svg renders the whole chart.
func (c *chart) svg() string {
	var w svgWriter
	ns := ` xmlns="http://www.w3.org/2000/svg"`
	if c.interactive {
		ns = ` id="timeline"`
	}
	w.f(`<svg%s viewBox="0 0 %d %d" width="%d" height="%d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		ns, chartW, chartH, chartW, chartH)
	w.f(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, chartH)
	c.header(&w)
	c.grid(&w)
	if len(c.tl.Events) == 0 {
		w.text((plotLeft+plotRight)/2, (plotTop+plotBottom)/2, `text-anchor="middle" font-size="15" fill="#555"`,
			"no history recorded: call EnableHistory on the allocator before the run")
	}
	c.areas(&w)
	c.reservedLine(&w)
	c.steps(&w)
	c.ooms(&w)
	c.peak(&w)
	c.axes(&w)
	c.panel(&w)
	if c.interactive {
		w.f(`<line id="cursor" x1="0" y1="%d" x2="0" y2="%d" stroke="#000" stroke-width="1" visibility="hidden"/>`+"\n", plotTop, plotBottom)
		w.f(`<rect id="hit" x="%d" y="%d" width="%d" height="%d" fill="transparent"/>`+"\n", plotLeft, plotTop, plotRight-plotLeft, plotBottom-plotTop)
	}
	w.f("</svg>\n")
	return w.String()
}

func (c *chart) header(w *svgWriter) {
	tl := c.tl
	w.text(plotLeft, 30, `font-size="20" font-weight="bold" fill="#222"`, "memfit memory timeline")
	capacity := "unlimited capacity"
	if tl.Capacity > 0 {
		capacity = memory.FormatBytes(tl.Capacity) + " capacity"
	}
	parts := []string{"device " + tl.Device, capacity, fmt.Sprintf("%d events", len(tl.Events))}
	if n := len(tl.Steps); n > 0 && len(tl.Events) > 0 {
		parts = append(parts, fmt.Sprintf("steps %d–%d", tl.Steps[0].Step, tl.Steps[n-1].Step))
	}
	if d := tl.Duration(); d > 0 {
		parts = append(parts, roundDuration(d).String())
	}
	w.text(plotLeft, 52, `fill="#555"`, strings.Join(parts, " · "))
}

func (c *chart) grid(w *svgWriter) {
	for _, v := range c.ticks {
		y := c.y(v)
		w.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`+"\n", plotLeft, y, plotRight, y)
		w.text(plotLeft-8, y+4, `text-anchor="end" fill="#333"`, tickLabel(v, c.unit, c.unitName))
	}
}

// areas draws one stacked area per category, as step functions over the
// sampled points.
func (c *chart) areas(w *svgWriter) {
	if len(c.tl.Events) == 0 {
		return
	}
	lower := make([]int64, len(c.samples))
	for _, cat := range c.cats {
		upper := make([]int64, len(c.samples))
		for k, s := range c.samples {
			upper[k] = lower[k] + c.tl.Points[s.index].ByCategory[cat]
		}
		var d strings.Builder
		for k, s := range c.samples {
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f L%.1f %.1f ", cmd, c.x(s.from), c.y(upper[k]), c.x(s.to), c.y(upper[k]))
		}
		for k := len(c.samples) - 1; k >= 0; k-- {
			s := c.samples[k]
			fmt.Fprintf(&d, "L%.1f %.1f L%.1f %.1f ", c.x(s.to), c.y(lower[k]), c.x(s.from), c.y(lower[k]))
		}
		w.f(`<path d="%sZ" fill="%s" fill-opacity="0.9" stroke="none"><title>%s</title></path>`+"\n",
			d.String(), categoryColors[cat], cat)
		lower = upper
	}
}

func (c *chart) reservedLine(w *svgWriter) {
	if len(c.tl.Events) == 0 {
		return
	}
	var d strings.Builder
	for k, s := range c.samples {
		cmd := "L"
		if k == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&d, "%s%.1f %.1f L%.1f %.1f ", cmd, c.x(s.from), c.y(s.reserved), c.x(s.to), c.y(s.reserved))
	}
	w.f(`<path d="%s" fill="none" stroke="#222" stroke-width="1.6"><title>reserved</title></path>`+"\n", d.String())
	if cp := c.tl.Capacity; cp > 0 && cp <= c.top {
		y := c.y(cp)
		w.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#b00" stroke-dasharray="6 3"/>`+"\n", plotLeft, y, plotRight, y)
		w.text(plotRight-4, y-4, `text-anchor="end" fill="#b00"`, "capacity "+memory.FormatBytes(cp))
	}
}

// steps marks the first event of every step but the first with a dashed
// line, and labels every step: "step N" across where there is room,
// the number turned upright where the steps are closer, and only every
// k-th number where even that would overlap (each line names its step
// under the mouse).
func (c *chart) steps(w *svgWriter) {
	if len(c.tl.Events) == 0 {
		return
	}
	type mark struct {
		x    float64
		step int64
	}
	first := c.tl.Steps[0]
	marks := []mark{{float64(plotLeft), first.Step}}
	for _, sp := range c.tl.Steps[1:] {
		x := c.x(sp.First)
		if x-marks[len(marks)-1].x < 3 {
			continue
		}
		marks = append(marks, mark{x, sp.Step})
		w.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555" stroke-width="0.8" stroke-dasharray="3 3"><title>step %d starts at event %d: %s allocated</title></line>`+"\n",
			x, plotTop, x, plotBottom, sp.Step, sp.First, memory.FormatBytes(c.tl.Points[max(sp.First-1, 0)].Allocated()))
	}
	gap := math.Inf(1)
	for i := 1; i < len(marks); i++ {
		gap = min(gap, marks[i].x-marks[i-1].x)
	}
	if gap >= stepLabelPx {
		for i, m := range marks {
			anchor := "middle"
			if i == 0 {
				anchor = "start"
			}
			w.text(m.x, plotTop-6, `text-anchor="`+anchor+`" font-size="10" fill="#444"`, fmt.Sprintf("step %d", m.step))
		}
		return
	}
	every := max(1, int(math.Ceil(uprightLabelPx/gap)))
	for i, m := range marks {
		if i%every == 0 {
			w.f(`<text x="%.1f" y="%d" transform="rotate(-90 %.1f %d)" text-anchor="start" font-size="9" fill="#444">%d</text>`+"\n",
				m.x+3, plotTop-4, m.x+3, plotTop-4, m.step)
		}
	}
}

func (c *chart) ooms(w *svgWriter) {
	for _, i := range c.tl.OOMs {
		e := c.tl.Events[i-1]
		x := c.x(i)
		w.f(`<g><title>out of memory at step %d: tried to reserve %s for %s</title>`, e.Step, memory.FormatBytes(e.Size), e.Category)
		w.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c00" stroke-width="1"/>`, x, plotTop, x, plotBottom)
		w.f(`<path d="M%.1f %d l-6 -10 h12 Z" fill="#c00"/>`, x, plotTop+10)
		w.text(x+8, plotTop+10, `font-size="10" font-weight="bold" fill="#c00"`, "OOM")
		w.f("</g>\n")
	}
}

func (c *chart) peak(w *svgWriter) {
	tl := c.tl
	if len(tl.Events) == 0 {
		return
	}
	p := tl.Peak
	x := (c.x(p.Index) + c.x(p.Index+1)) / 2
	y := c.y(p.Allocated)
	label := fmt.Sprintf("peak %s at step %d", memory.FormatBytes(p.Allocated), p.Step)
	// The label sits above the marker, on whichever side has room.
	lx, anchor := x+10, "start"
	if x > (plotLeft+plotRight)/2 {
		lx, anchor = x-10, "end"
	}
	ly := max(y-14, plotTop+14)
	w.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-width="1"/>`+"\n", x, y, lx, ly+4)
	width := 7*len(label) + 4 // about 7 units a character in bold 12
	rx := lx - 2
	if anchor == "end" {
		rx = lx - float64(width) + 2
	}
	w.f(`<rect x="%.1f" y="%.1f" width="%d" height="18" fill="#fff" fill-opacity="0.85"/>`+"\n", rx, ly-13, width)
	w.text(lx, ly, fmt.Sprintf(`text-anchor="%s" font-weight="bold" fill="#000"`, anchor), label)
	w.f(`<circle cx="%.1f" cy="%.1f" r="5" fill="#fff" stroke="#000" stroke-width="2"><title>%s (event %d): %s reserved</title></circle>`+"\n",
		x, y, html.EscapeString(label), p.Index, memory.FormatBytes(p.Reserved))
}

func (c *chart) axes(w *svgWriter) {
	w.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>`+"\n", plotLeft, plotTop, plotLeft, plotBottom)
	w.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#222"/>`+"\n", plotLeft, plotBottom, plotRight, plotBottom)
	n := len(c.tl.Points) - 1
	for _, v := range countTicks(n, 8) {
		x := c.x(v)
		w.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#222"/>`+"\n", x, plotBottom, x, plotBottom+5)
		w.text(x, plotBottom+18, `text-anchor="middle" fill="#333"`, countLabel(v))
	}
	w.text((plotLeft+plotRight)/2, plotBottom+40, `text-anchor="middle" fill="#222"`,
		"allocator events, oldest recorded first (dashed lines: step boundaries)")
	w.f(`<text transform="translate(24 %d) rotate(-90)" text-anchor="middle" fill="#222">bytes (allocated by category, reserved)</text>`+"\n",
		(plotTop+plotBottom)/2)
}

// panel draws the legend, with each category's bytes at the peak, and the
// sites that held the most memory at the peak.
func (c *chart) panel(w *svgWriter) {
	tl := c.tl
	x := float64(panelLeft)
	y := float64(plotTop)
	right := float64(chartW - 16)
	w.text(x, y, `font-weight="bold" fill="#222"`, "allocated by category")
	w.text(right, y, `text-anchor="end" font-weight="bold" fill="#222"`, "at peak")
	y += 20
	for i := len(c.cats) - 1; i >= 0; i-- {
		cat := c.cats[i]
		w.f(`<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`+"\n", x, y-10, categoryColors[cat])
		w.text(x+18, y, `fill="#222"`, cat.String())
		w.text(right, y, `text-anchor="end" fill="#222"`, memory.FormatBytes(tl.Peak.Point.ByCategory[cat]))
		y += 18
	}
	w.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222" stroke-width="1.6"/>`+"\n", x, y-4, x+12, y-4)
	w.text(x+18, y, `fill="#222"`, "reserved")
	w.text(right, y, `text-anchor="end" fill="#222"`, memory.FormatBytes(tl.Peak.Reserved))
	y += 18
	w.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="3 3"/>`+"\n", x+6, y-12, x+6, y+2)
	w.text(x+18, y, `fill="#222"`, "step boundary")
	y += 18
	w.f(`<circle cx="%.1f" cy="%.1f" r="5" fill="#fff" stroke="#000" stroke-width="2"/>`+"\n", x+6, y-4)
	w.text(x+18, y, `fill="#222"`, "peak allocated")
	y += 18
	if len(tl.OOMs) > 0 {
		w.f(`<path d="M%.1f %.1f l-6 -10 h12 Z" fill="#c00"/>`+"\n", x+6, y+1)
		w.text(x+18, y, `fill="#222"`, fmt.Sprintf("out of memory (%d)", len(tl.OOMs)))
		y += 18
	}

	y += 16
	w.text(x, y, `font-weight="bold" fill="#222"`, fmt.Sprintf("live at the peak (step %d), by site", tl.Peak.Step))
	y += 20
	sites := tl.Peak.Sites
	if len(sites) == 0 {
		w.text(x, y, `fill="#555"`, "nothing live")
	}
	for i, s := range sites {
		if i == maxSites {
			var rest int64
			for _, r := range sites[i:] {
				rest += r.Bytes
			}
			w.text(x, y, `fill="#555"`, fmt.Sprintf("… %d more sites, %s", len(sites)-i, memory.FormatBytes(rest)))
			break
		}
		w.f(`<g><title>%s</title>`, html.EscapeString(fmt.Sprintf("%s: %d %s blocks, %s", siteOrUnknown(s.Site), s.Blocks, s.Category, memory.FormatBytes(s.Bytes))))
		w.f(`<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s"/>`, x, y-8, categoryColors[s.Category])
		w.text(x+82, y, `text-anchor="end" font-family="monospace" font-size="11" fill="#222"`, memory.FormatBytes(s.Bytes))
		w.text(x+88, y, `font-family="monospace" font-size="11" fill="#222"`, fit(shortSite(s.Site), 28))
		w.f("</g>\n")
		y += 16
	}
}

func siteOrUnknown(s string) string {
	if s == "" {
		return "site unknown (allocated before history was on, or without a site function)"
	}
	return s
}
