package device

import (
	"fmt"
	"slices"
	"strings"
	"sync"
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

var registry struct {
	sync.Mutex
	open  map[string]Opener
	lacks map[string][]string
}

// Register makes a device available to Open under name. Device packages
// call it from an init function, as database/sql drivers do, so a program
// offers a device by importing its package (for its side effect alone,
// with _, if it uses nothing else of it). Registering a name twice, or a
// nil opener, panics: both are programming errors.
func Register(name string, open Opener) {
	registry.Lock()
	defer registry.Unlock()
	if open == nil {
		panic("device: Register of a nil opener for " + name)
	}
	if _, dup := registry.open[name]; dup {
		panic("device: Register called twice for " + name)
	}
	if registry.open == nil {
		registry.open = map[string]Opener{}
	}
	registry.open[name] = open
}

// Open makes a device of the registered kind name.
func Open(name string, o Options) (Device, error) {
	registry.Lock()
	open := registry.open[name]
	registry.Unlock()
	if open == nil {
		return nil, fmt.Errorf("unknown device %q (registered: %s; a device package registers itself when imported)", name, strings.Join(Names(), ", "))
	}
	return open(o)
}

// Lacking records that the device registered as name lacks the named
// capabilities, so that a planner standing in for it (the meta device,
// which has them all) can hide the same ones and its plan stays exact.
func Lacking(name string, capabilities ...string) {
	registry.Lock()
	defer registry.Unlock()
	if registry.lacks == nil {
		registry.lacks = map[string][]string{}
	}
	registry.lacks[name] = append(registry.lacks[name], capabilities...)
}

// Lacks lists the capabilities Lacking recorded for name.
func Lacks(name string) []string {
	registry.Lock()
	defer registry.Unlock()
	return slices.Clone(registry.lacks[name])
}

// Names lists the registered devices, sorted.
func Names() []string {
	registry.Lock()
	defer registry.Unlock()
	names := make([]string, 0, len(registry.open))
	for n := range registry.open {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
