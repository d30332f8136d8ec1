package tensor

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// The leak detector records where each live tensor handle was created.
// It costs a stack walk per tensor, so it is off unless TrackLeaks(true).
var (
	leakOn  atomic.Bool
	leakMu  sync.Mutex
	leakMap = map[*Tensor]string{}
)

// TrackLeaks turns creation-site recording on or off. Tensors created while
// it is off are not reported.
func TrackLeaks(on bool) {
	leakOn.Store(on)
	if !on {
		leakMu.Lock()
		clear(leakMap)
		leakMu.Unlock()
	}
}

func track(t *Tensor) {
	if !leakOn.Load() {
		return
	}
	site := callerSite()
	leakMu.Lock()
	leakMap[t] = site
	leakMu.Unlock()
}

func untrack(t *Tensor) {
	if !leakOn.Load() {
		return
	}
	leakMu.Lock()
	delete(leakMap, t)
	leakMu.Unlock()
}

// callerSite is the file:line of the first caller outside this package:
// the line of user (or layer) code that asked for the tensor.
func callerSite() string {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !strings.Contains(f.Function, "memfit/memfit/tensor.") || strings.HasSuffix(f.File, "_test.go") {
			return fmt.Sprintf("%s:%d", f.File, f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}

// Live describes a tensor handle that has not been released.
type Live struct {
	Site  string // file:line where it was created
	Shape []int
	DType DType
	Bytes int64
	Name  string
}

// LiveTensors lists the unreleased handles created while tracking was on,
// largest first.
func LiveTensors() []Live {
	leakMu.Lock()
	defer leakMu.Unlock()
	out := make([]Live, 0, len(leakMap))
	for t, site := range leakMap {
		out = append(out, Live{Site: site, Shape: t.shape, DType: t.dtype, Bytes: t.Bytes(), Name: t.name})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Site < out[j].Site
	})
	return out
}

// LeakReport renders LiveTensors grouped by creation site.
func LeakReport() string {
	live := LiveTensors()
	if len(live) == 0 {
		return "no live tensors\n"
	}
	type group struct {
		site  string
		n     int
		bytes int64
		shape []int
		dtype DType
	}
	bySite := map[string]*group{}
	var order []*group
	for _, l := range live {
		g := bySite[l.Site]
		if g == nil {
			g = &group{site: l.Site, shape: l.Shape, dtype: l.DType}
			bySite[l.Site] = g
			order = append(order, g)
		}
		g.n++
		g.bytes += l.Bytes
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].bytes > order[j].bytes })
	var b strings.Builder
	fmt.Fprintf(&b, "%d live tensors:\n", len(live))
	for _, g := range order {
		fmt.Fprintf(&b, "  %s: %d × %v %v, %d bytes\n", g.site, g.n, g.dtype, g.shape, g.bytes)
	}
	return b.String()
}
