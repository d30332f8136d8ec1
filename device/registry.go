package device

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/memfit/memfit/internal/registry"
)

// Options are what a run says about the device it wants, whatever the
// device: each registered opener maps them onto its own constructor.
type Options struct {
	// Capacity is the most bytes the device's allocator may hold; 0 leaves
	// it to the device (the CPU device's default follows the machine's
	// memory).
	Capacity int64
	// Ordinal picks one of several devices of the kind (a GPU of a
	// machine with several); devices with one ignore it.
	Ordinal int
}

// An Opener makes a device from Options.
type Opener func(Options) (Device, error)

var (
	openers = registry.New[Opener]("device")
	lacking struct {
		sync.Mutex
		m map[string][]string
	}
	onHost sync.Map // name → true: the device's memory is the host's
)

// InHostMemory records that the device registered as name keeps its
// memory in the host's (the CPU device): memory offloaded to the host
// then comes out of the same budget, which planners add up.
func InHostMemory(name string) { onHost.Store(name, true) }

// OnHost reports whether InHostMemory recorded name.
func OnHost(name string) bool {
	_, ok := onHost.Load(name)
	return ok
}

// Register makes a device available to Open under name. Device packages
// call it from an init function, as database/sql drivers do, so a program
// offers a device by importing its package (for its side effect alone,
// with _, if it uses nothing else of it). Registering a name twice, or a
// nil opener, panics: both are programming errors.
func Register(name string, open Opener) { openers.Register(name, open) }

// Open makes a device of the registered kind name.
func Open(name string, o Options) (Device, error) {
	open, ok := openers.Get(name)
	if !ok {
		return nil, fmt.Errorf("unknown device %q (registered: %s; a device package registers itself when imported)", name, strings.Join(Names(), ", "))
	}
	return open(o)
}

// Lacking records that the device registered as name lacks the named
// capabilities, so that a planner standing in for it (the meta device,
// which has them all) can hide the same ones and its plan stays exact.
func Lacking(name string, capabilities ...string) {
	lacking.Lock()
	defer lacking.Unlock()
	if lacking.m == nil {
		lacking.m = map[string][]string{}
	}
	lacking.m[name] = append(lacking.m[name], capabilities...)
}

// Lacks lists the capabilities Lacking recorded for name.
func Lacks(name string) []string {
	lacking.Lock()
	defer lacking.Unlock()
	return slices.Clone(lacking.m[name])
}

// Names lists the registered devices, sorted.
func Names() []string { return openers.Names() }
