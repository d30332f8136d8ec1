package memory_test

import (
	"errors"
	"fmt"

	"github.com/memfit/memfit/memory"
)

func ExampleAllocator() {
	a := memory.New(memory.NewCountingRaw(0, "meta"))

	x, _ := a.Alloc(1000, memory.Activation)
	fmt.Println("block:", x.Size(), "bytes for", x.Requested(), "requested")
	fmt.Println("reserved:", memory.FormatBytes(a.Reserved()))

	a.Free(x) // back to the cache, not to the device
	y, _ := a.Alloc(900, memory.Temporary)
	s := a.Stats()
	fmt.Println("same address:", y.Ptr() == x.Ptr(), "cache hits:", s.CacheHits, "raw allocs:", s.RawAllocs)

	a.Free(y)
	a.EmptyCache()
	fmt.Println("after EmptyCache:", memory.FormatBytes(a.Reserved()), "reserved,", memory.FormatBytes(a.MaxAllocated()), "peak")
	// Output:
	// block: 1024 bytes for 1000 requested
	// reserved: 2.00 MiB
	// same address: true cache hits: 1 raw allocs: 1
	// after EmptyCache: 0 B reserved, 1.00 KiB peak
}

func ExampleOOMError() {
	a := memory.New(memory.NewCountingRaw(64<<20, "meta"))
	a.Alloc(30<<20, memory.Activation)
	a.Alloc(12<<20, memory.Parameter)
	_, err := a.Alloc(40<<20, memory.Activation)
	var oom *memory.OOMError
	if errors.As(err, &oom) {
		fmt.Println(oom.Categories()[0], memory.FormatBytes(oom.Free), "free")
		fmt.Println(err)
	}
	// Output:
	// activation 22.00 MiB free
	// memory: out of memory: tried to allocate 40.00 MiB (device meta; 64.00 MiB capacity; 42.00 MiB allocated; 0 B reserved but unallocated; 22.00 MiB free; 42.00 MiB reserved); held by activation 30.00 MiB, parameter 12.00 MiB; try: -checkpoint sqrt, -amp bf16, -accum 4, a smaller -batch, -offload activations or -tile 2048
}

func ExampleParseBytes() {
	for _, s := range []string{"512MiB", "1.5GB", "100 KiB", "123", "12 parsecs"} {
		n, err := memory.ParseBytes(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(n, memory.FormatBytes(n))
	}
	// Output:
	// 536870912 512.00 MiB
	// 1500000000 1.40 GiB
	// 102400 100.00 KiB
	// 123 123 B
	// memory: bad byte size "12 parsecs": unknown unit "parsecs" (want B, KB, KiB, MB, MiB, GB, GiB, TB or TiB)
}

func ExampleFormatBytes() {
	fmt.Println(memory.FormatBytes(512), memory.FormatBytes(916<<20), memory.FormatBytes(6<<30))
	// Output: 512 B 916.00 MiB 6.00 GiB
}
