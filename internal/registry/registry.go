// Package registry holds things made by name, as database/sql holds its
// drivers: devices, optimizers and models each keep one Registry of their
// constructors, which their packages fill from init functions.
package registry

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
)

// Registry maps names to values of T (constructors), safe for concurrent
// use.
type Registry[T any] struct {
	kind string // "device", "optimizer", …, for panics
	mu   sync.Mutex
	m    map[string]T
}

// New returns an empty registry of things of the given kind.
func New[T any](kind string) *Registry[T] { return &Registry[T]{kind: kind} }

// Register makes v available under name. Registering a name twice, or a
// nil v, panics: both are programming errors, found at start-up.
func (r *Registry[T]) Register(name string, v T) {
	if rv := reflect.ValueOf(&v).Elem(); rv.Kind() == reflect.Func && rv.IsNil() {
		panic(fmt.Sprintf("registry: nil %s constructor registered as %q", r.kind, name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[name]; dup {
		panic(fmt.Sprintf("registry: %s %q registered twice", r.kind, name))
	}
	if r.m == nil {
		r.m = map[string]T{}
	}
	r.m[name] = v
}

// Get returns what name was registered with.
func (r *Registry[T]) Get(name string) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[name]
	return v, ok
}

// Names lists the registered names, sorted.
func (r *Registry[T]) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
