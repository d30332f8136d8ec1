package tensor

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/memfit/memfit/memory"
)

// DefaultGrowthSteps is the number of consecutive growing step boundaries
// after which a GrowthDetector made with k <= 0 warns.
const DefaultGrowthSteps = 5

// GrowthDetector finds memory that grows step after step in a training
// loop: a loss kept with its graph for logging, an output appended to a
// slice, anything that survives its step and accumulates. Call Observe at
// every step boundary (after the optimizer step); when allocated bytes have
// grown at k consecutive boundaries it warns, once, with the growth by
// category and the creation sites of the tensors created during those steps
// that are still alive, with the autograd graphs they hold. When no tracked
// handle explains the growth (a Detach()ed copy holds the storage) and the
// allocator records its history with sites (EnableAllocSites), it names the
// sites of the blocks allocated during those steps that are still live.
//
// It turns on leak tracking (TrackLeaks), which records a creation site per
// tensor: a debugging aid, with a stack walk per tensor. It watches the
// tensors of one allocator; use it from the goroutine that runs the loop.
type GrowthDetector struct {
	a    *memory.Allocator
	k    int
	warn func(string)

	observed bool
	warned   bool
	last     int64 // allocated bytes at the last boundary
	streak   int   // consecutive boundaries at which allocated bytes grew

	// The boundary before the current streak: its step, allocated bytes,
	// requested bytes by category and live tracked tensors.
	startStep  int
	startBytes int64
	startCats  [memory.NumCategories]int64
	startLive  map[*Tensor]string
	startTime  time.Time
}

// NewGrowthDetector returns a detector of growth in a's allocated bytes over
// k consecutive steps (DefaultGrowthSteps if k <= 0) that reports through
// warn (nil: a line on standard error). It turns leak tracking on; tensors
// made before are not named in reports.
func NewGrowthDetector(a *memory.Allocator, k int, warn func(msg string)) *GrowthDetector {
	if k <= 0 {
		k = DefaultGrowthSteps
	}
	if warn == nil {
		warn = func(msg string) { fmt.Fprintln(os.Stderr, msg) }
	}
	TrackLeaks(true)
	return &GrowthDetector{a: a, k: k, warn: warn}
}

// Warned reports whether the detector has warned.
func (d *GrowthDetector) Warned() bool { return d.warned }

// Observe records the step boundary after step: allocated bytes now, and
// the tensors alive. It warns when allocated bytes have now grown at k
// boundaries in a row; after warning it does nothing.
func (d *GrowthDetector) Observe(step int) {
	if d.warned {
		return
	}
	st := d.a.Stats()
	now := st.Allocated.Current
	if d.observed && now > d.last {
		d.streak++
	} else {
		d.streak = 0
		d.startStep, d.startBytes, d.startLive, d.startTime = step, now, d.liveTensors(), time.Now()
		for c := range memory.NumCategories {
			d.startCats[c] = st.ByCategory[c].Current
		}
	}
	d.observed, d.last = true, now
	if d.streak >= d.k {
		d.warned = true
		d.warn(d.message(step, st))
		d.startLive = nil
	}
}

// liveTensors copies the tracked tensors of d's allocator with their sites.
func (d *GrowthDetector) liveTensors() map[*Tensor]string {
	leakMu.Lock()
	defer leakMu.Unlock()
	out := make(map[*Tensor]string, len(leakMap))
	for t, site := range leakMap {
		if t.st.dev.Memory() == d.a {
			out[t] = site
		}
	}
	return out
}

// survivorSite is what the warning says about one creation site.
type survivorSite struct {
	site       string
	born, gone int     // tensors made in the streak and still alive; tensors alive at its start and gone since
	bytes      int64   // bytes of the tensors born
	sample     *Tensor // one of the tensors born
	nodes      int     // autograd nodes their graphs hold
	saved      int64   // bytes of the saved tensors those nodes hold
}

// message describes the growth from the streak's start to now.
func (d *GrowthDetector) message(step int, st memory.Stats) string {
	now := st.Allocated.Current
	var b strings.Builder
	fmt.Fprintf(&b, "memfit: allocated memory grew at each of the last %d step boundaries (from after step %d to after step %d): %s -> %s (+%s",
		d.k, d.startStep, step, memory.FormatBytes(d.startBytes), memory.FormatBytes(now), memory.FormatBytes(now-d.startBytes))
	for c := range memory.NumCategories {
		if delta := st.ByCategory[c].Current - d.startCats[c]; delta > 0 {
			fmt.Fprintf(&b, "; %s +%s", c, memory.FormatBytes(delta))
		}
	}
	b.WriteString(")\n")

	live := d.liveTensors()
	bySite := map[string]*survivorSite{}
	get := func(site string) *survivorSite {
		s := bySite[site]
		if s == nil {
			s = &survivorSite{site: site}
			bySite[site] = s
		}
		return s
	}
	born := map[string][]*Tensor{}
	for t, site := range live {
		if _, old := d.startLive[t]; !old {
			s := get(site)
			s.born++
			s.bytes += t.Bytes()
			born[site] = append(born[site], t)
		}
	}
	for t, site := range d.startLive {
		if _, ok := live[t]; !ok {
			get(site).gone++
		}
	}
	// A site that made as many tensors as it lost (a gradient set to none
	// and made again, a batch replaced by the next) does not grow.
	var growing []*survivorSite
	for site, s := range bySite {
		if s.born > s.gone {
			s.sample = born[site][0]
			s.nodes, s.saved = graphHeld(born[site])
			growing = append(growing, s)
		}
	}
	slices.SortFunc(growing, func(x, y *survivorSite) int {
		return cmp.Or(cmp.Compare(y.bytes+y.saved, x.bytes+x.saved), cmp.Compare(y.born, x.born), cmp.Compare(x.site, y.site))
	})
	if len(growing) == 0 {
		b.WriteString("  no tensor handle made in those steps is still alive")
		d.blockSites(&b)
		return b.String()
	}
	b.WriteString("  tensors made in those steps and still alive, by creation site:\n")
	graphs := false
	for i, s := range growing {
		if i == 8 {
			fmt.Fprintf(&b, "  ... and %d more sites\n", len(growing)-i)
			break
		}
		kind := "each"
		for _, t := range born[s.site] {
			if t.dtype != s.sample.dtype || !slices.Equal(t.shape, s.sample.shape) {
				kind = "and others"
				break
			}
		}
		fmt.Fprintf(&b, "  %s: +%d tensors (%v %v %s), %s", s.site, s.born-s.gone, s.sample.dtype, s.sample.shape, kind, memory.FormatBytes(s.bytes))
		if s.nodes > 0 {
			graphs = true
			fmt.Fprintf(&b, ", holding their autograd graphs: %d ops", s.nodes)
			if s.saved > 0 {
				fmt.Fprintf(&b, " keeping %s of saved tensors alive", memory.FormatBytes(s.saved))
			}
		}
		b.WriteString("\n")
	}
	if graphs {
		b.WriteString("  a tensor kept across steps keeps its autograd graph and its storage: keep host values (loss.Item()) instead, or release what you keep once done")
	} else {
		b.WriteString("  release what you no longer need, or keep host values (Item, Float32s) instead of tensors")
	}
	return b.String()
}

// graphHeld counts the autograd nodes reachable from ts and the bytes of
// the tensors those nodes saved, each storage once, leaving out parameters,
// gradients and optimizer state, which live on anyway.
func graphHeld(ts []*Tensor) (nodes int, saved int64) {
	seenNode := map[*node]bool{}
	seenStorage := map[*storage]bool{}
	var stack []*node
	for _, t := range ts {
		seenStorage[t.st] = true
		if t.node != nil && !seenNode[t.node] {
			seenNode[t.node] = true
			stack = append(stack, t.node)
		}
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		nodes++
		for _, s := range n.saved {
			if s == nil {
				// Packed away by a SavedHooks: not on this device.
				continue
			}
			if seenStorage[s.st] {
				continue
			}
			seenStorage[s.st] = true
			if blk := s.st.buf.Block; blk != nil {
				switch blk.Category() {
				case memory.Parameter, memory.Gradient, memory.OptimizerState:
				default:
					saved += blk.Requested()
				}
			}
		}
		for _, e := range n.edges {
			if e.node != nil && !seenNode[e.node] {
				seenNode[e.node] = true
				stack = append(stack, e.node)
			}
		}
	}
	return nodes, saved
}

// blockSites ends the warning when no tracked handle explains the growth
// (the memory is held through a handle made by Detach, through storage
// shared with something older, or outside tensors): from the allocator's
// history, it names the sites of the blocks allocated since the streak
// began that are still live.
func (d *GrowthDetector) blockSites(b *strings.Builder) {
	if !d.a.HistoryEnabled() {
		b.WriteString("; to name the sites of the blocks that survive, turn on the allocator's history (EnableHistory) and EnableAllocSites\n")
		return
	}
	type block struct {
		site string
		size int64
	}
	live := map[memory.Ptr]block{}
	for _, e := range d.a.History() {
		if e.Time.Before(d.startTime) {
			continue
		}
		switch e.Kind {
		case memory.EventAlloc:
			live[e.Ptr] = block{e.Site, e.Size}
		case memory.EventFree:
			delete(live, e.Ptr)
		}
	}
	type group struct {
		site   string
		blocks int
		bytes  int64
	}
	bySite := map[string]*group{}
	var groups []*group
	for _, blk := range live {
		g := bySite[blk.site]
		if g == nil {
			g = &group{site: blk.site}
			bySite[blk.site] = g
			groups = append(groups, g)
		}
		g.blocks++
		g.bytes += blk.size
	}
	if len(groups) == 0 {
		b.WriteString(", and the allocator's history holds no block allocated since then that is still live\n")
		return
	}
	slices.SortFunc(groups, func(x, y *group) int { return cmp.Or(cmp.Compare(y.bytes, x.bytes), cmp.Compare(x.site, y.site)) })
	b.WriteString("; blocks allocated since then and still live, by site (from the allocator's history):\n")
	for i, g := range groups {
		if i == 8 {
			fmt.Fprintf(b, "  ... and %d more sites\n", len(groups)-i)
			break
		}
		site := g.site
		if site == "" {
			site = "(site unknown: call EnableAllocSites)"
		}
		fmt.Fprintf(b, "  %s: %d blocks, %s\n", site, g.blocks, memory.FormatBytes(g.bytes))
	}
	b.WriteString("  a handle made by Detach, or a view, keeps the storage of what it came from: release it, or keep host values (Item, Float32s)")
}
