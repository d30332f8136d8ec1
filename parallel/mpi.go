//go:build mpi

package parallel

/*
#cgo pkg-config: ompi
#include <mpi.h>

static int memfit_init(int *provided) {
	int flag = 0;
	MPI_Initialized(&flag);
	if (flag) {
		MPI_Query_thread(provided);
	} else {
		int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, provided);
		if (rc != MPI_SUCCESS) return rc;
	}
	return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}
static int memfit_rank(int *r) { return MPI_Comm_rank(MPI_COMM_WORLD, r); }
static int memfit_size(int *n) { return MPI_Comm_size(MPI_COMM_WORLD, n); }
static MPI_Op memfit_op(int op) {
	switch (op) {
	case 2: return MPI_MAX;
	case 3: return MPI_MIN;
	}
	return MPI_SUM;
}
static int memfit_allreduce(float *buf, int n, int op) {
	return MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, memfit_op(op), MPI_COMM_WORLD);
}
static int memfit_reduce_scatter(float *in, float *out, int k, int op) {
	return MPI_Reduce_scatter_block(in, out, k, MPI_FLOAT, memfit_op(op), MPI_COMM_WORLD);
}
static int memfit_allgather(float *in, float *out, int k) {
	return MPI_Allgather(in, k, MPI_FLOAT, out, k, MPI_FLOAT, MPI_COMM_WORLD);
}
static int memfit_bcast(float *buf, int n, int root) {
	return MPI_Bcast(buf, n, MPI_FLOAT, root, MPI_COMM_WORLD);
}
static int memfit_barrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }
static int memfit_finalize(void) { return MPI_Finalize(); }
static void memfit_error_string(int code, char *buf, int *len) {
	if (MPI_Error_string(code, buf, len) != MPI_SUCCESS) *len = 0;
}
static int memfit_max_error_string(void) { return MPI_MAX_ERROR_STRING; }
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/memfit/memfit/tensor"
)

// MPIOption configures NewMPI.
type MPIOption func(*mpiComm)

// MPITimeout sets the watchdog of NewMPI's collectives (default
// DefaultTimeout): a collective that has not completed by then returns an
// error and the communicator is unusable; the program should exit, which
// makes mpirun end the job.
func MPITimeout(d time.Duration) MPIOption { return func(m *mpiComm) { m.timeout = d } }

var mpiOnce struct {
	sync.Mutex
	comm *mpiComm
	err  error
}

// NewMPI returns the communicator of MPI_COMM_WORLD (ranks as launched by
// mpirun; a program started without mpirun is one rank). MPI is
// initialised once per process, with MPI_THREAD_FUNNELED: every MPI call
// runs on one goroutine locked to the OS thread that initialised MPI, and
// errors are returned (MPI_ERRORS_RETURN), not fatal. Later calls return
// the same communicator; after Close, MPI cannot be used again in this
// process.
func NewMPI(opts ...MPIOption) (Comm, error) {
	mpiOnce.Lock()
	defer mpiOnce.Unlock()
	if mpiOnce.comm != nil || mpiOnce.err != nil {
		return mpiOnce.comm, mpiOnce.err
	}
	m := &mpiComm{timeout: DefaultTimeout, calls: make(chan func())}
	for _, o := range opts {
		o(m)
	}
	ready := make(chan error)
	go m.loop(ready)
	if err := <-ready; err != nil {
		mpiOnce.err = err
		return nil, err
	}
	mpiOnce.comm = m
	return m, nil
}

type mpiComm struct {
	rank, size int
	timeout    time.Duration
	calls      chan func() // run on the MPI thread
	seq        uint64
	broken     error
	closed     bool
}

// loop is the MPI thread: it initialises MPI and runs every call.
func (m *mpiComm) loop(ready chan<- error) {
	runtime.LockOSThread()
	var provided, rank, size C.int
	if rc := C.memfit_init(&provided); rc != C.MPI_SUCCESS {
		ready <- fmt.Errorf("dist: MPI_Init_thread: %s", mpiError(rc))
		return
	}
	if provided < C.MPI_THREAD_FUNNELED {
		ready <- fmt.Errorf("dist: MPI provides thread level %d, below MPI_THREAD_FUNNELED", int(provided))
		return
	}
	if rc := C.memfit_rank(&rank); rc != C.MPI_SUCCESS {
		ready <- fmt.Errorf("dist: MPI_Comm_rank: %s", mpiError(rc))
		return
	}
	if rc := C.memfit_size(&size); rc != C.MPI_SUCCESS {
		ready <- fmt.Errorf("dist: MPI_Comm_size: %s", mpiError(rc))
		return
	}
	m.rank, m.size = int(rank), int(size)
	ready <- nil
	for fn := range m.calls {
		fn()
	}
}

func mpiError(rc C.int) string {
	buf := make([]C.char, int(C.memfit_max_error_string()))
	var n C.int
	C.memfit_error_string(rc, &buf[0], &n)
	if n <= 0 {
		return fmt.Sprintf("MPI error %d", int(rc))
	}
	return C.GoStringN(&buf[0], n)
}

func (m *mpiComm) Rank() int { return m.rank }
func (m *mpiComm) Size() int { return m.size }

// run executes fn (returning an MPI code) on the MPI thread and waits for
// it at most the timeout.
func (m *mpiComm) run(op string, fn func() C.int) error {
	if m.closed {
		return ErrClosed
	}
	if m.broken != nil {
		return m.broken
	}
	m.seq++
	done := make(chan C.int, 1)
	m.calls <- func() { done <- fn() }
	timer := time.NewTimer(m.timeout)
	defer timer.Stop()
	select {
	case rc := <-done:
		if rc != C.MPI_SUCCESS {
			m.broken = fmt.Errorf("dist: mpi %s #%d on rank %d: %s", op, m.seq, m.rank, mpiError(rc))
			return m.broken
		}
		return nil
	case <-timer.C:
		m.broken = fmt.Errorf("dist: mpi %s #%d on rank %d did not complete within %v: a rank is dead, hung or out of step (mpirun names a rank that exited)", op, m.seq, m.rank, m.timeout)
		return m.broken
	}
}

// host copies a tensor's values into a float32 slice.
func host(t *tensor.Tensor) []float32 { return t.Float32s() }

// buffers returns what MPI reads (in's memory, or a copy) and where it
// writes (out's memory, inPlace, or a new slice for finish to store).
func buffers(in, out *tensor.Tensor) (src, dst []float32, inPlace bool) {
	src, dst = direct(in), direct(out)
	if src == nil {
		src = host(in)
	}
	if dst == nil {
		return src, make([]float32, out.Len()), false
	}
	return src, dst, true
}

// finish completes a collective whose result is in buf: in place (buf is
// out's own memory) only Avg's division remains; otherwise buf is stored.
func (m *mpiComm) finish(out *tensor.Tensor, buf []float32, inPlace bool, op Op) error {
	if !inPlace {
		return m.store(out, buf, op)
	}
	if op == Avg {
		inv := 1 / float32(m.size)
		for i := range buf {
			buf[i] *= inv
		}
	}
	return nil
}

func cint(op string, n int) (C.int, error) {
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("dist: mpi %s: %d elements exceed MPI's int count; use smaller buckets", op, n)
	}
	return C.int(n), nil
}

func ptr(v []float32) *C.float {
	if len(v) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&v[0]))
}

func (m *mpiComm) AllReduce(t *tensor.Tensor, op Op) error {
	if err := checkF32("all_reduce", "tensor", t); err != nil {
		return err
	}
	n, err := cint("all_reduce", t.Len())
	if err != nil {
		return err
	}
	buf := direct(t)
	inPlace := buf != nil
	if !inPlace {
		buf = host(t)
	}
	if err := m.run("all_reduce", func() C.int { return C.memfit_allreduce(ptr(buf), n, C.int(op)) }); err != nil {
		return err
	}
	return m.finish(t, buf, inPlace, op)
}

// store writes buf back into t, dividing by Size for Avg.
func (m *mpiComm) store(t *tensor.Tensor, buf []float32, op Op) error {
	if op == Avg {
		inv := 1 / float32(m.size)
		for i := range buf {
			buf[i] *= inv
		}
	}
	return tensor.Catch(func() error { return t.SetFloat32s(buf) })
}

func (m *mpiComm) ReduceScatter(out, in *tensor.Tensor, op Op) error {
	if err := checkScatter("reduce_scatter", m.size, out, in); err != nil {
		return err
	}
	k, err := cint("reduce_scatter", in.Len())
	if err != nil {
		return err
	}
	k = C.int(out.Len())
	src, dst, inPlace := buffers(in, out)
	if err := m.run("reduce_scatter", func() C.int { return C.memfit_reduce_scatter(ptr(src), ptr(dst), k, C.int(op)) }); err != nil {
		return err
	}
	return m.finish(out, dst, inPlace, op)
}

func (m *mpiComm) AllGather(out, in *tensor.Tensor) error {
	if err := checkScatter("all_gather", m.size, in, out); err != nil {
		return err
	}
	if _, err := cint("all_gather", out.Len()); err != nil {
		return err
	}
	k := C.int(in.Len())
	src, dst, inPlace := buffers(in, out)
	if err := m.run("all_gather", func() C.int { return C.memfit_allgather(ptr(src), ptr(dst), k) }); err != nil {
		return err
	}
	return m.finish(out, dst, inPlace, Sum)
}

func (m *mpiComm) Broadcast(t *tensor.Tensor, root int) error {
	if err := checkF32("broadcast", "tensor", t); err != nil {
		return err
	}
	if root < 0 || root >= m.size {
		return fmt.Errorf("dist: broadcast: root %d outside [0, %d)", root, m.size)
	}
	n, err := cint("broadcast", t.Len())
	if err != nil {
		return err
	}
	buf := direct(t)
	inPlace := buf != nil
	switch {
	case inPlace:
	case m.rank == root:
		buf = host(t)
	default:
		buf = make([]float32, t.Len())
	}
	if err := m.run("broadcast", func() C.int { return C.memfit_bcast(ptr(buf), n, C.int(root)) }); err != nil {
		return err
	}
	if m.rank == root {
		return nil
	}
	return m.finish(t, buf, inPlace, Sum)
}

func (m *mpiComm) Barrier() error {
	return m.run("barrier", func() C.int { return C.memfit_barrier() })
}

// Close finalises MPI (MPI_Finalize, collective over all ranks). A
// communicator whose collective timed out is not finalised:
// the MPI thread is stuck, and the process should exit.
func (m *mpiComm) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	if m.broken != nil {
		return nil
	}
	done := make(chan C.int, 1)
	m.calls <- func() { done <- C.memfit_finalize() }
	close(m.calls)
	select {
	case rc := <-done:
		if rc != C.MPI_SUCCESS {
			return fmt.Errorf("dist: MPI_Finalize: %s", mpiError(rc))
		}
		return nil
	case <-time.After(m.timeout):
		return fmt.Errorf("dist: MPI_Finalize on rank %d did not complete within %v", m.rank, m.timeout)
	}
}
