package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Row kernels that run once per layer per step (softmax, layer norm,
// cross-entropy) are values of small structs rather than closures: a
// closure handed to other goroutines escapes to the heap at every call,
// while a struct is copied into a pooled job that persistent workers run.
// So these kernels make no heap allocation per call, however many
// goroutines they use (BenchmarkRowKernels: 0 allocs/op).

// partJob is one call's state; part(p) computes part p of parts.
type partJob interface{ part(p, parts int) }

// rowsJob computes rows [r0, r1) of a row-wise kernel.
type rowsJob interface{ rows(r0, r1 int) }

// rowParts splits rows·width elements as parallelRange does, so that each
// part gets the rows starting in its share of the elements.
type rowParts[K rowsJob] struct {
	k            K
	total, width int
}

func (r rowParts[K]) part(p, parts int) {
	s, e := r.total*p/parts, r.total*(p+1)/parts
	r.k.rows((s+r.width-1)/r.width, (e+r.width-1)/r.width)
}

// runRowsJob calls k.rows over [0, rows), spread over up to d.threads
// goroutines when the work (rows·width elements) is large; the partition
// is parallelRange's.
func runRowsJob[K rowsJob](d *Device, rows, width int, k K) {
	if rows == 0 {
		return
	}
	w := max(width, 1)
	total := rows * w
	parts := 1
	if d.threads > 1 && total >= parallelMin {
		parts = min(d.threads, total/(parallelMin/2))
	}
	if parts <= 1 {
		k.rows(0, rows)
		return
	}
	runParts(parts, rowParts[K]{k: k, total: total, width: w})
}

// runParts runs j.part(p, parts) for every p in [0, parts): on the calling
// goroutine and on up to parts-1 workers.
func runParts[J partJob](parts int, j J) {
	if parts <= 1 {
		j.part(0, 1)
		return
	}
	pj := getPartJob[J]()
	pj.j, pj.parts = j, parts
	pj.next.Store(0)
	startPartWorkers(parts - 1)
	for h := 1; h < parts; h++ {
		pj.wg.Add(1)
		select {
		case partCh <- pj:
		default: // every worker busy (kernels called from many goroutines): fewer helpers
			pj.wg.Done()
		}
	}
	pj.work()
	pj.wg.Wait()
	var zero J
	pj.j = zero // drop the views
	putPartJob(pj)
}

// parted is a job as the workers see it.
type parted interface {
	work()
	done()
}

type partJobOf[J partJob] struct {
	j     J
	parts int
	next  atomic.Int64
	wg    sync.WaitGroup
}

// work claims and runs parts until none is left, so a helper that starts
// late finds nothing to do rather than holding the caller up.
func (pj *partJobOf[J]) work() {
	for {
		p := int(pj.next.Add(1) - 1)
		if p >= pj.parts {
			return
		}
		pj.j.part(p, pj.parts)
	}
}

func (pj *partJobOf[J]) done() { pj.wg.Done() }

// partPools keeps one pool of job structs per kernel type; a sync.Pool is
// enough here, since a job is a few dozen bytes.
var partPools sync.Map // map[*partJobOf[J]]*sync.Pool, keyed by a typed nil pointer

func partPool[J partJob]() *sync.Pool {
	var key *partJobOf[J]
	if p, ok := partPools.Load(key); ok {
		return p.(*sync.Pool)
	}
	p, _ := partPools.LoadOrStore(key, new(sync.Pool))
	return p.(*sync.Pool)
}

func getPartJob[J partJob]() *partJobOf[J] {
	if pj, ok := partPool[J]().Get().(*partJobOf[J]); ok {
		return pj
	}
	return new(partJobOf[J])
}

func putPartJob[J partJob](pj *partJobOf[J]) { partPool[J]().Put(pj) }

var (
	partCh       = make(chan parted, 64)
	partWorkers  atomic.Int64
	partWorkerMu sync.Mutex
)

// startPartWorkers makes sure at least n workers exist; they live for the
// life of the program, parked on partCh when idle.
func startPartWorkers(n int) {
	n = min(n, runtime.GOMAXPROCS(0))
	if int(partWorkers.Load()) >= n {
		return
	}
	partWorkerMu.Lock()
	defer partWorkerMu.Unlock()
	for int(partWorkers.Load()) < n {
		partWorkers.Add(1)
		go func() {
			for j := range partCh {
				j.work()
				j.done()
			}
		}()
	}
}
