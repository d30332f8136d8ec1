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
			site = sitePath(f) + ":" + strconv.Itoa(f.Line)
			break
		}
		if !more {
			break
		}
	}
	siteCache.Store(pcs, site)
	return site
}

// sitePath names f's file by its package's import path and the file's
// name, memfit's own relative to the module ("models/gpt.go"), others in
// full ("example.com/trainer/loop.go"), so that reports do not depend on
// where the source was built; a main package's file is named by its
// directory ("train/main.go").
func sitePath(f runtime.Frame) string {
	file := f.File[strings.LastIndexByte(f.File, '/')+1:]
	pkg := f.Function
	if i := strings.LastIndexByte(pkg, '/'); i >= 0 {
		if j := strings.IndexByte(pkg[i:], '.'); j >= 0 {
			pkg = pkg[:i+j]
		}
	} else if j := strings.IndexByte(pkg, '.'); j >= 0 {
		pkg = pkg[:j]
	}
	switch {
	case pkg == "" || f.Function == "":
		return f.File
	case pkg == "main":
		dir := strings.TrimSuffix(f.File, "/"+file)
		return dir[strings.LastIndexByte(dir, '/')+1:] + "/" + file
	}
	pkg = strings.TrimSuffix(pkg, "_test") // an external test package lives in its package's directory
	return strings.TrimPrefix(pkg, "github.com/memfit/memfit/") + "/" + file
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
