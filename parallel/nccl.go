//go:build cuda

package parallel

/*
#cgo LDFLAGS: -lnccl -lcuda
#include <cuda.h>
#include <nccl.h>

static ncclResult_t memfit_nccl_init(ncclComm_t* comm, int n, const char* id, int rank) {
	ncclUniqueId u;
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) u.internal[i] = id[i];
	return ncclCommInitRank(comm, n, u, rank);
}
static ncclResult_t memfit_nccl_id(char* id) {
	ncclUniqueId u;
	ncclResult_t r = ncclGetUniqueId(&u);
	for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) id[i] = u.internal[i];
	return r;
}
// Device addresses come from Go as integers (they are not Go memory).
static ncclResult_t memfit_nccl_allreduce(uintptr_t p, size_t n, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
	return ncclAllReduce((void*)p, (void*)p, n, ncclFloat32, op, c, s);
}
static ncclResult_t memfit_nccl_reducescatter(uintptr_t in, uintptr_t out, size_t n, ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
	return ncclReduceScatter((void*)in, (void*)out, n, ncclFloat32, op, c, s);
}
static ncclResult_t memfit_nccl_allgather(uintptr_t in, uintptr_t out, size_t n, ncclComm_t c, cudaStream_t s) {
	return ncclAllGather((void*)in, (void*)out, n, ncclFloat32, c, s);
}
static ncclResult_t memfit_nccl_broadcast(uintptr_t p, size_t n, int root, ncclComm_t c, cudaStream_t s) {
	return ncclBroadcast((void*)p, (void*)p, n, ncclFloat32, root, c, s);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// NCCLOption configures NewNCCL.
type NCCLOption func(*ncclComm)

// NCCLTimeout bounds how long a collective may take before the
// communicator is aborted and the collective returns an error (default
// DefaultTimeout): a dead peer otherwise leaves the GPU waiting for ever.
func NCCLTimeout(d time.Duration) NCCLOption { return func(c *ncclComm) { c.timeout = d } }

type ncclComm struct {
	dev        *cuda.Device
	comm       C.ncclComm_t
	rank, size int
	timeout    time.Duration
	broken     error
}

// NewNCCL makes a communicator of NCCL over the GPUs of bootstrap's ranks,
// one GPU per rank (dev, a *cuda.Device or a wrapper of one such as
// device.Without's: see device.As): rank 0 draws NCCL's unique id
// and broadcasts it through bootstrap (typically NewMPI's communicator),
// then every rank joins. Collectives run on dev's compute stream, in
// order with its kernels, on the tensors' device memory directly; each
// returns once the GPU has finished it.
func NewNCCL(bootstrap Comm, dev device.Device, opts ...NCCLOption) (Comm, error) {
	d, err := ncclDevice(dev)
	if err != nil {
		return nil, err
	}
	c := &ncclComm{dev: d, rank: bootstrap.Rank(), size: bootstrap.Size(), timeout: DefaultTimeout}
	for _, o := range opts {
		o(c)
	}
	// The unique id travels as one float per byte, which every engine
	// carries exactly.
	id := make([]byte, C.NCCL_UNIQUE_ID_BYTES)
	if c.rank == 0 {
		err := d.OnStream(func(unsafe.Pointer) error {
			return ncclErr("ncclGetUniqueId", C.memfit_nccl_id((*C.char)(unsafe.Pointer(&id[0]))))
		})
		if err != nil {
			return nil, err
		}
	}
	vals := make([]float32, len(id))
	for i, b := range id {
		vals[i] = float32(b)
	}
	t, err := tensor.FromFloat32(dev, vals, []int{len(vals)}, memory.Temporary)
	if err != nil {
		return nil, fmt.Errorf("dist: nccl: %w", err)
	}
	err = bootstrap.Broadcast(t, 0)
	vals = t.Float32s()
	t.Release()
	if err != nil {
		return nil, fmt.Errorf("dist: nccl: sending the unique id: %w", err)
	}
	for i, v := range vals {
		id[i] = byte(v)
	}
	err = d.OnStream(func(unsafe.Pointer) error {
		return ncclErr("ncclCommInitRank", C.memfit_nccl_init(&c.comm, C.int(c.size), (*C.char)(unsafe.Pointer(&id[0])), C.int(c.rank)))
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func ncclErr(op string, r C.ncclResult_t) error {
	if r == C.ncclSuccess {
		return nil
	}
	return fmt.Errorf("dist: nccl: %s: %s", op, C.GoString(C.ncclGetErrorString(r)))
}

func (c *ncclComm) Rank() int { return c.rank }
func (c *ncclComm) Size() int { return c.size }

var ncclOps = map[Op]C.ncclRedOp_t{Sum: C.ncclSum, Avg: C.ncclAvg, Max: C.ncclMax, Min: C.ncclMin}

// devPtr is the address of t's first element in GPU memory.
func devPtr(t *tensor.Tensor) C.uintptr_t {
	v := t.View()
	return C.uintptr_t(uintptr(v.Buf.Block.Ptr()) + uintptr(v.Offset*v.DType.Size()))
}

// run queues one collective on the compute stream and waits for it,
// polling so that a peer that never joins cannot hold the rank for ever:
// past the timeout, or on an asynchronous NCCL error, the communicator is
// aborted and every later call fails at once.
func (c *ncclComm) run(op string, t *tensor.Tensor, queue func(stream C.cudaStream_t) C.ncclResult_t) error {
	if c.broken != nil {
		return c.broken
	}
	if t != nil && !onGPU(t, c.dev) {
		return fmt.Errorf("dist: nccl %s: tensor on %s, communicator on %s", op, t.Device().Name(), c.dev.Name())
	}
	err := c.dev.OnStream(func(stream unsafe.Pointer) error {
		s := C.cudaStream_t(stream)
		if err := ncclErr(op, queue(s)); err != nil {
			return err
		}
		deadline := time.Now().Add(c.timeout)
		for {
			switch r := C.cuStreamQuery(C.CUstream(stream)); r {
			case C.CUDA_SUCCESS:
				return nil
			case C.CUDA_ERROR_NOT_READY:
			default:
				return fmt.Errorf("dist: nccl %s: cuStreamQuery: CUDA error %d", op, int(r))
			}
			var async C.ncclResult_t
			if err := ncclErr("ncclCommGetAsyncError", C.ncclCommGetAsyncError(c.comm, &async)); err != nil {
				return err
			}
			if async != C.ncclSuccess && async != C.ncclInProgress {
				C.ncclCommAbort(c.comm)
				return ncclErr(op, async)
			}
			if time.Now().After(deadline) {
				C.ncclCommAbort(c.comm)
				return fmt.Errorf("dist: nccl %s: not complete after %v (a rank died or stopped joining collectives); communicator aborted", op, c.timeout)
			}
			time.Sleep(20 * time.Microsecond)
		}
	})
	if err != nil {
		c.broken = err
	}
	return err
}

func (c *ncclComm) AllReduce(t *tensor.Tensor, op Op) error {
	if err := checkF32("all_reduce", "tensor", t); err != nil {
		return err
	}
	p := devPtr(t)
	return c.run("all_reduce", t, func(s C.cudaStream_t) C.ncclResult_t {
		return C.memfit_nccl_allreduce(p, C.size_t(t.Len()), ncclOps[op], c.comm, s)
	})
}

func (c *ncclComm) ReduceScatter(out, in *tensor.Tensor, op Op) error {
	if err := checkScatter("reduce_scatter", c.size, out, in); err != nil {
		return err
	}
	src, dst := devPtr(in), devPtr(out)
	return c.run("reduce_scatter", in, func(s C.cudaStream_t) C.ncclResult_t {
		return C.memfit_nccl_reducescatter(src, dst, C.size_t(out.Len()), ncclOps[op], c.comm, s)
	})
}

func (c *ncclComm) AllGather(out, in *tensor.Tensor) error {
	if err := checkScatter("all_gather", c.size, in, out); err != nil {
		return err
	}
	src, dst := devPtr(in), devPtr(out)
	return c.run("all_gather", in, func(s C.cudaStream_t) C.ncclResult_t {
		return C.memfit_nccl_allgather(src, dst, C.size_t(in.Len()), c.comm, s)
	})
}

func (c *ncclComm) Broadcast(t *tensor.Tensor, root int) error {
	if err := checkF32("broadcast", "tensor", t); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return fmt.Errorf("dist: nccl broadcast: root %d of %d ranks", root, c.size)
	}
	p := devPtr(t)
	return c.run("broadcast", t, func(s C.cudaStream_t) C.ncclResult_t {
		return C.memfit_nccl_broadcast(p, C.size_t(t.Len()), C.int(root), c.comm, s)
	})
}

// Barrier is an all-reduce of one element: NCCL has no barrier of its own.
func (c *ncclComm) Barrier() error {
	t, err := tensor.New(c.dev, tensor.F32, []int{1}, memory.Temporary)
	if err != nil {
		return err
	}
	defer t.Release()
	return c.AllReduce(t, Sum)
}

// Close destroys the NCCL communicator (aborting it if it is broken).
func (c *ncclComm) Close() error {
	if c.comm == nil {
		return nil
	}
	err := c.dev.OnStream(func(unsafe.Pointer) error {
		if c.broken != nil {
			return ncclErr("ncclCommAbort", C.ncclCommAbort(c.comm))
		}
		return ncclErr("ncclCommDestroy", C.ncclCommDestroy(c.comm))
	})
	c.comm = nil
	return errors.Join(err)
}
