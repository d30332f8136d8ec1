// Package memory owns device memory accounting for memfit: the caching
// allocator that sits on every device's raw allocator, its statistics, the
// out-of-memory error and byte-size formatting.
//
// # The caching allocator
//
// An [Allocator] takes memory from a [Raw] allocator (anonymous mappings
// from the operating system on the CPU device, cuMemAlloc on CUDA, made-up addresses on the meta device) in large
// segments and carves blocks out of them, as PyTorch's CUDA caching
// allocator does:
//
//   - every request is rounded up to a multiple of 512 bytes ([RoundSize]);
//   - requests of at most 1 MiB come from the small pool, whose segments are
//     2 MiB; larger requests come from the large pool, whose segments are
//     20 MiB for requests under 10 MiB and the request rounded up to 2 MiB
//     otherwise ([SegmentSize]);
//   - a request takes the smallest free block of its pool that fits (lowest
//     address on ties) and splits it when the rest is at least 512 bytes
//     (small pool) or more than 1 MiB (large pool);
//   - a freed block goes back to its pool, merged with free neighbours in its
//     segment, and is reused without asking Raw again;
//   - when Raw refuses a segment, every idle segment (one with no live block)
//     is returned to Raw and the request is retried once before the
//     allocator gives up with an [*OOMError]. [Allocator.EmptyCache] returns
//     idle segments on demand.
//
// A segment never exceeds Raw's capacity: when the usual segment size would,
// the segment is cut to the rounded request.
//
// # Statistics
//
// [Allocator.Stats] reports current, peak and running totals of allocated,
// requested, reserved, active and inactive-split bytes, event counters, and
// requested bytes per [Category] (parameters, gradients, optimizer state,
// activations, temporaries, data, other). [Allocator.Summary] renders them as
// a table, [Allocator.Snapshot] lists every segment and block, and
// [Allocator.SegmentMap] draws the segments as bars of their blocks by
// category, which shows where reserved but unallocated memory sits.
//
// # History
//
// [Allocator.EnableHistory] keeps a ring buffer of recent events (alloc,
// free, segment alloc and free, recategorization, OOM), each with its size,
// category, step ([Allocator.SetStep]) and time. A site function
// ([Allocator.SetSiteFunc]; tensor.EnableAllocSites installs one) names the
// code that asked for each block; it is called only while history is on. A
// Snapshot taken while history is on carries the events and the sites of
// live blocks, consistent with its segments; package memory/report replays
// them into a timeline and draws it as SVG, as one self-contained HTML page
// or as text.
//
// # Out of memory
//
// [*OOMError] carries the numbers at the moment of failure and renders a
// message that names the categories holding the memory and the memfit
// technique that would cut the largest of them ([Hint]).
//
// # Sizes
//
// [FormatBytes] and [ParseBytes] convert between byte counts and strings
// such as "916.00 MiB" or "512MiB".
//
// [CountingRaw] is a Raw that hands out made-up addresses: the meta device
// and tests use it.
//
// An Allocator is safe for concurrent use; one mutex guards it.
package memory
