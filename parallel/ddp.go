package parallel

import (
	"fmt"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// DDPConfig configures data-parallel gradient averaging.
type DDPConfig struct {
	// BucketBytes is the size of the buffer gradients are packed into for
	// one all-reduce (0: DefaultBucketBytes). The bucket is allocated on
	// the parameters' device as memory.Temporary for the duration of
	// ReduceGradients.
	BucketBytes int64
}

// DDP keeps the replicas of a model identical across the ranks of a
// communicator: every rank holds all parameters, computes gradients on its
// own shard of the batch, and averages them with the others before the
// optimizer step.
type DDP struct {
	comm   Comm
	dev    device.Device
	params []*tensor.Tensor
	bucket int // elements
}

// NewDDP checks params (distinct live contiguous F32 or BF16 tensors on one device,
// in the same order on every rank) and makes every rank's parameters equal
// to rank 0's (Broadcast), so that replicas start identical whatever their
// initialisation.
func NewDDP(c Comm, params []*tensor.Tensor, cfg DDPConfig) (*DDP, error) {
	if c == nil {
		return nil, fmt.Errorf("dist: ddp: nil communicator")
	}
	dev, err := checkParams("ddp", params)
	if err != nil {
		return nil, err
	}
	d := &DDP{comm: c, dev: dev, params: append([]*tensor.Tensor(nil), params...), bucket: bucketElems(cfg.BucketBytes)}
	if err := d.BroadcastParams(0); err != nil {
		return nil, err
	}
	return d, nil
}

// Comm is the communicator.
func (d *DDP) Comm() Comm { return d.comm }

// BroadcastParams copies root's parameter values to every rank, bucket by
// bucket.
func (d *DDP) BroadcastParams(root int) error {
	if d.comm.Size() == 1 {
		return nil
	}
	return broadcastFlat(d.comm, d.dev, newFlat(d.params), d.bucket, root)
}

// ReduceGradients replaces every parameter's gradient by the average of
// the ranks' gradients. Call it once per optimizer step, after the last
// micro-batch's backward of an accumulation window and before clipping,
// unscaling or the step: accumulated gradients are communicated once per
// window, never per micro-batch.
//
// A parameter no rank has a gradient for (frozen, unused) is skipped and
// keeps none; one that only some ranks have a gradient for is averaged
// with zeros from the others. Gradients are packed into buckets of
// BucketBytes (memory.Temporary) and all-reduced one bucket at a time.
func (d *DDP) ReduceGradients() error {
	if d.comm.Size() == 1 {
		return nil
	}
	counts, err := syncPresence(d.comm, d.dev, d.params)
	if err != nil {
		return fmt.Errorf("dist: ddp: %w", err)
	}
	var active []*tensor.Tensor
	for i, p := range d.params {
		if counts[i] > 0 {
			active = append(active, p)
		}
	}
	if len(active) == 0 {
		return nil
	}
	f := newFlat(active)
	grad := func(i int) *tensor.Tensor { return f.params[i].Grad() }
	return f.eachBucket(d.dev, d.bucket, "dist: ddp: gradients", func(s *tensor.Scope, b *tensor.Tensor, lo, hi int) error {
		f.gather(s, b, lo, hi, grad)
		if err := d.comm.AllReduce(b, Avg); err != nil {
			return err
		}
		f.scatter(s, b, lo, hi, grad)
		return nil
	})
}

// broadcastFlat copies root's values of f's tensors to every rank through
// a bucket of at most bucket elements.
func broadcastFlat(c Comm, dev device.Device, f *flat, bucket, root int) error {
	val := func(i int) *tensor.Tensor { return f.params[i] }
	return f.eachBucket(dev, bucket, "dist: broadcast of parameters", func(s *tensor.Scope, b *tensor.Tensor, lo, hi int) error {
		if c.Rank() == root {
			f.gather(s, b, lo, hi, val)
		}
		if err := c.Broadcast(b, root); err != nil {
			return err
		}
		if c.Rank() != root {
			f.scatter(s, b, lo, hi, val)
		}
		return nil
	})
}

// eachBucket runs fn over f's flat vector a range of at most bucket
// elements at a time, with b a buffer of that range's length (one
// memory.Temporary bucket for the whole walk) and s a scope for the
// packing; an error names what and the range.
func (f *flat) eachBucket(dev device.Device, bucket int, what string, fn func(s *tensor.Scope, b *tensor.Tensor, lo, hi int) error) error {
	if f.total == 0 {
		return nil
	}
	k := min(bucket, f.total)
	buf, err := tensor.New(dev, tensor.F32, []int{k}, memory.Temporary)
	if err != nil {
		return fmt.Errorf("%s: bucket: %w", what, err)
	}
	defer buf.Release()
	for lo := 0; lo < f.total; lo += k {
		hi := min(lo+k, f.total)
		err := tensor.Catch(func() error {
			s := tempScope()
			defer s.Close()
			return fn(s, s.Narrow(buf, 0, 0, hi-lo), lo, hi)
		})
		if err != nil {
			return fmt.Errorf("%s [%d, %d) of %d: %w", what, lo, hi, f.total, err)
		}
	}
	return nil
}
