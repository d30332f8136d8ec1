package memory

import (
	"cmp"
	"slices"
	"strings"
)

// InterruptError is an allocation refused because the computation was
// interrupted (Allocator.Interrupt): its context was cancelled.
type InterruptError struct {
	Device string
	Err    error // why: context.Canceled, say
}

func (e *InterruptError) Error() string {
	return "memory: interrupted on device " + e.Device + ": " + e.Err.Error()
}

// Unwrap returns why the computation was interrupted.
func (e *InterruptError) Unwrap() error { return e.Err }

// OOMError reports an allocation the device could not hold, with the
// numbers at the moment of failure (after idle segments were released).
type OOMError struct {
	// Requested is the number of bytes asked for; Size is what the allocator
	// tried to reserve for them (the segment it asked Raw for, or the
	// rounded request when it did not ask).
	Requested, Size int64
	// Category is the category of the failed request.
	Category Category
	// Capacity is the device's capacity (<= 0: unlimited); Allocated and
	// Reserved are the allocator's current bytes; Free is Capacity -
	// Reserved, or -1 when the capacity is unlimited.
	Capacity, Allocated, Reserved, Free int64
	Device                              string
	// ByCategory holds the requested bytes of live blocks per category.
	ByCategory [NumCategories]int64
	// Err is Raw's refusal, nil when the request alone exceeds the capacity.
	Err error
	// Tried names the options already in effect when the request failed,
	// by flag ("-accum", "-checkpoint", "-amp", "-batch" once micro-batches
	// are single examples; "-offload activations" and "-offload optimizer"
	// by what they move): the hint leaves them out rather than suggest
	// what has just failed. The allocator leaves it empty; the trainer
	// fills it in.
	Tried []string
}

// Error says what was asked for, what the device holds and who holds it, and
// what to turn on to make it fit, as in
//
//	memory: out of memory: tried to allocate 916.00 MiB (device cpu; 6.00 GiB
//	capacity; 4.47 GiB allocated; 2.00 MiB reserved but unallocated;
//	1.53 GiB free; 4.47 GiB reserved); held by activation 3.10 GiB,
//	parameter 900.00 MiB; try: -checkpoint sqrt, -amp bf16, -accum 4 or a
//	smaller -batch
func (e *OOMError) Error() string {
	var b strings.Builder
	b.WriteString("memory: out of memory: tried to allocate ")
	b.WriteString(FormatBytes(e.Requested))
	b.WriteString(" (device ")
	b.WriteString(e.Device)
	b.WriteString("; ")
	if e.Capacity > 0 {
		b.WriteString(FormatBytes(e.Capacity))
		b.WriteString(" capacity; ")
	} else {
		b.WriteString("unlimited capacity; ")
	}
	b.WriteString(FormatBytes(e.Allocated))
	b.WriteString(" allocated; ")
	b.WriteString(FormatBytes(e.Reserved - e.Allocated))
	b.WriteString(" reserved but unallocated; ")
	if e.Free >= 0 {
		b.WriteString(FormatBytes(e.Free))
		b.WriteString(" free; ")
	} else {
		b.WriteString("free unknown; ")
	}
	b.WriteString(FormatBytes(e.Reserved))
	b.WriteString(" reserved)")
	cats := e.Categories()
	for i, c := range cats {
		if i == 0 {
			b.WriteString("; held by ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(c.String())
		b.WriteByte(' ')
		b.WriteString(FormatBytes(e.ByCategory[c]))
	}
	switch {
	case e.Capacity > 0 && (e.Requested > e.Capacity || e.Size > e.Capacity):
		b.WriteString("; the request alone exceeds the capacity: try a smaller -batch or model")
	case len(cats) > 0 && hint(cats[0], e.Tried) != "":
		b.WriteString("; try: ")
		b.WriteString(hint(cats[0], e.Tried))
	case len(cats) > 0 && len(e.Tried) > 0:
		b.WriteString("; ")
		b.WriteString(strings.Join(e.Tried, ", "))
		b.WriteString(" did not make it fit: try a smaller model or -batch")
	}
	return b.String()
}

// Unwrap returns Raw's refusal, if any.
func (e *OOMError) Unwrap() error { return e.Err }

// Categories returns the categories that hold memory, largest first (ties in
// category order).
func (e *OOMError) Categories() []Category {
	var cats []Category
	for c := range NumCategories {
		if e.ByCategory[c] > 0 {
			cats = append(cats, c)
		}
	}
	slices.SortStableFunc(cats, func(x, y Category) int { return cmp.Compare(e.ByCategory[y], e.ByCategory[x]) })
	return cats
}
