package gemm

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// minWorkPerThread is the number of multiply-adds below which an extra
// goroutine costs more than it saves.
const minWorkPerThread = 1 << 19

// run computes the product, split over up to parts goroutines when it is
// large enough. k > 0 and alpha != 0.
func run[S, D any, C float32 | float64](parts int, tri region, e *engine[S, D, C], pool *wsPool[D, C], m, n, k int, alpha C, a, b mat[S], beta C, c []C, ldc int, o *out16) {
	parts = max(parts, 1)
	if work := m * n * k; parts > 1 && work < parts*minWorkPerThread {
		parts = max(1, work/minWorkPerThread)
	}
	// Split the larger of m and n: every part packs all of the other
	// operand, so this duplicates the smaller packing.
	splitM := m >= n
	units := (n + e.nr - 1) / e.nr
	if splitM {
		units = (m + e.mr - 1) / e.mr
	}
	parts = min(parts, units)
	if parts <= 1 {
		ws := pool.get()
		e.serial(ws, m, n, k, alpha, a, b, beta, c, ldc, o, tri)
		pool.put(ws)
		return
	}
	j := getJob[S, D, C]()
	*j = job[S, D, C]{e: e, pool: pool, m: m, n: n, k: k, alpha: alpha, a: a, b: b, beta: beta, c: c, ldc: ldc, tri: tri,
		parts: parts, units: units, splitM: splitM}
	if o != nil {
		// By value: the caller's out16 stays on its stack.
		j.o, j.hasO = *o, true
	}
	startWorkers(parts - 1)
	// Offer the job to parts-1 helpers; everyone, the caller included,
	// claims parts until none is left, so a helper that wakes late finds
	// nothing to do instead of holding the caller up.
	for h := 1; h < parts; h++ {
		j.wg.Add(1)
		j.helpers.Add(1)
		select {
		case workCh <- j:
		default: // queue full (other GEMMs running): fewer helpers
			j.helpers.Add(-1)
			j.wg.Done()
		}
	}
	j.work()
	// Spin briefly before parking: waking a parked goroutine (and the idle
	// CPU under it) can take ~100µs in a VM, as long as a whole mid-sized GEMM.
	for i := 0; j.helpers.Load() > 0 && i < spinChecks; i++ {
		spinPause()
	}
	j.wg.Wait()
	*j = job[S, D, C]{}
	putJob(j)
}

// job is one GEMM split into parts along m or n.
type job[S, D any, C float32 | float64] struct {
	e           *engine[S, D, C]
	pool        *wsPool[D, C]
	m, n, k     int
	alpha, beta C
	a, b        mat[S]
	c           []C
	ldc         int
	o           out16 // a 16-bit C (when hasO), c being its float32 scratch
	hasO        bool
	tri         region
	parts       int
	units       int // mr-row or nr-column blocks along the split dimension
	splitM      bool
	next        atomic.Int64   // next unclaimed part
	helpers     atomic.Int64   // helpers holding the job
	wg          sync.WaitGroup // the same, to park on
}

// work runs unclaimed parts until there are none.
func (j *job[S, D, C]) work() {
	for {
		p := int(j.next.Add(1) - 1)
		if p >= j.parts {
			return
		}
		j.runPart(p)
	}
}

func (j *job[S, D, C]) runPart(p int) {
	u0, u1 := j.units*p/j.parts, j.units*(p+1)/j.parts
	if u0 == u1 {
		return
	}
	ws := j.pool.get()
	c := j.c
	var o *out16
	if j.hasO {
		o = &j.o
	}
	if j.splitM {
		i0, i1 := u0*j.e.mr, min(u1*j.e.mr, j.m)
		if c != nil {
			c = c[i0*j.ldc:]
		}
		if o != nil {
			o = o.rowsFrom(i0)
		}
		tri := j.tri
		tri.row0 += i0
		j.e.serial(ws, i1-i0, j.n, j.k, j.alpha, j.a.rowsFrom(i0), j.b, j.beta, c, j.ldc, o, tri)
	} else {
		j0, j1 := u0*j.e.nr, min(u1*j.e.nr, j.n)
		if c != nil {
			c = c[j0:]
		}
		if o != nil {
			o = o.colsFrom(j0)
		}
		tri := j.tri
		tri.col0 += j0
		j.e.serial(ws, j.m, j1-j0, j.k, j.alpha, j.a, j.b.colsFrom(j0), j.beta, c, j.ldc, o, tri)
	}
	j.pool.put(ws)
}

// jobPools keeps job structs per instantiation so that steady-state calls
// do not allocate.
var jobPools sync.Map // map[*T]*sync.Pool keyed by a typed nil pointer

func jobPool[S, D any, C float32 | float64]() *sync.Pool {
	var key *job[S, D, C]
	if p, ok := jobPools.Load(key); ok {
		return p.(*sync.Pool)
	}
	p, _ := jobPools.LoadOrStore(key, new(sync.Pool))
	return p.(*sync.Pool)
}

func getJob[S, D any, C float32 | float64]() *job[S, D, C] {
	if j, ok := jobPool[S, D, C]().Get().(*job[S, D, C]); ok {
		return j
	}
	return new(job[S, D, C])
}

func putJob[S, D any, C float32 | float64](j *job[S, D, C]) { jobPool[S, D, C]().Put(j) }

// part is the view of a job that workers need.
type part interface {
	work()
	done()
}

// workCh queues jobs for the workers.
var (
	workCh    = make(chan part, 64)
	nWorkers  atomic.Int64
	workersMu sync.Mutex
)

// startWorkers makes sure at least n worker goroutines exist. Workers live
// for the life of the program and sleep on workCh when idle.
func startWorkers(n int) {
	if int(nWorkers.Load()) >= n {
		return
	}
	workersMu.Lock()
	defer workersMu.Unlock()
	for int(nWorkers.Load()) < n {
		nWorkers.Add(1)
		go worker()
	}
}

// worker runs jobs. After each it polls for the next one for a while
// (yielding its P so that nothing else starves) before parking, because a
// GEMM usually follows a GEMM and waking a parked worker is slow.
func worker() {
	for {
		var j part
		select {
		case j = <-workCh:
		default:
			for i := 0; i < spinChecks && j == nil; i++ {
				runtime.Gosched()
				select {
				case j = <-workCh:
				default:
				}
			}
			if j == nil {
				j = <-workCh
			}
		}
		j.work()
		j.done()
	}
}

// spinChecks bounds the polling loops (each check takes roughly 0.1-1µs).
const spinChecks = 1000

func spinPause() { runtime.Gosched() }

func (j *job[S, D, C]) done() {
	j.helpers.Add(-1)
	j.wg.Done()
}
