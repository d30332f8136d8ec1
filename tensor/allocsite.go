package tensor

import (
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/memfit/memfit/memory"
)

// EnableAllocSites makes a record, with every block it allocates while its
// history is on (memory.Allocator.EnableHistory), the code that asked for
// the memory: the file:line of the first caller outside memfit's tensor,
// device and memory packages (a model's forward, a layer, a test). Memory
// reports (memory/report) show these sites, at the peak and under the
// mouse. While history is off it costs nothing; while it is on, a short
// stack walk per allocation, cached by call path.
func EnableAllocSites(a *memory.Allocator) { a.SetSiteFunc(allocSite) }

// siteDepth is how many frames allocSite looks at: enough to climb out of
// the allocator, the device, and the op that allocated.
const siteDepth = 24

// siteCache maps a call path ([siteDepth]uintptr) to its site.
var siteCache sync.Map

// allocSite is the site function EnableAllocSites installs.
func allocSite() string {
	var pcs [siteDepth]uintptr
	// Skip runtime.Callers and allocSite itself.
	n := runtime.Callers(2, pcs[:])
	if s, ok := siteCache.Load(pcs); ok {
		return s.(string)
	}
	site := "unknown"
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if !internalFrame(f) {
			site = f.File + ":" + strconv.Itoa(f.Line)
			break
		}
		if !more {
			break
		}
	}
	siteCache.Store(pcs, site)
	return site
}

// internalFrame reports whether f is inside the packages that allocate on a
// caller's behalf: tensor (its tests excepted), device and memory.
func internalFrame(f runtime.Frame) bool {
	const module = "github.com/memfit/memfit/"
	fn, ok := strings.CutPrefix(f.Function, module)
	if !ok {
		return false
	}
	for _, p := range []string{"tensor.", "memory.", "device.", "device/"} {
		if strings.HasPrefix(fn, p) {
			return !strings.HasSuffix(f.File, "_test.go")
		}
	}
	return false
}
