package parallel

import (
	"errors"
	"fmt"

	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// Stage 2's reduction during backward. Armed (ReduceDuringBackward) for one
// backward pass, the parameters' OnGradReady hooks reduce the gradients
// bucket by bucket as backward completes them: a bucket here is a
// contiguous range of the flat parameter vector (not the rank-strided
// buckets of ReduceGradients), all-reduced as soon as every parameter
// overlapping it is complete, in the order backward completes them (the
// same on every rank, whose graphs are the same). Each rank copies its
// owned part into the shard gradients and releases every full gradient
// whose buckets are all reduced. So full gradients exist only for the
// parameters backward has finished and whose buckets still wait for a
// neighbour: Gradient peaks near 4P/N plus a few buckets instead of 4P.
// An all-reduce moves twice the bytes of a reduce-scatter; that is the
// price of reducing a range before the rest of the vector exists.
//
// With accumulation it can be armed for every micro-batch's backward
// (each call of ReduceDuringBackward before ReduceGradients starts another
// pass of the same step): each pass's buckets are reduced and added into
// the shard gradients, so full gradients never outlive their pass, at
// the price of one reduction per micro-batch (DeepSpeed's stage 2) where
// arming the last pass alone communicates once per step but holds every
// full gradient until then (PyTorch's no_sync).

type overlap struct {
	k       int    // elements per bucket
	armed   bool   // this backward reduces
	pass    int    // armed passes in this step (1: the first)
	fired   []bool // params[i] completed in this backward
	seen    []bool // params[i] completed in some pass of this step
	waiting []int  // per bucket: parameters overlapping it not yet complete
	left    []int  // per parameter: its buckets not yet reduced
	reduced []bool // per bucket
	err     error  // the first failure inside a hook
	buf     *tensor.Tensor
}

// buckets returns the buckets [first, last] that parameter i overlaps.
func (o *overlap) buckets(f *flat, i int) (int, int) {
	n := f.params[i].Len()
	return f.off[i] / o.k, (f.off[i] + n - 1) / o.k
}

// ReduceDuringBackward arms stage 2 to reduce gradients during the next
// backward pass: call it before that backward, then ReduceGradients after
// the step's last backward as usual, which reduces whatever backward did
// not complete. With accumulation, arm either the last micro-batch's
// backward alone or every micro-batch's (calling it again before each
// backward of the step): see the overlap. Every rank must arm the same
// passes. The parameters' OnGradReady hooks belong to the ZeRO
// while it lives. A parameter used inside a checkpointed segment and also
// outside it is not supported (its gradient would be reduced when the
// segment's pass completes, before the rest arrives) and is reported by
// ReduceGradients.
func (z *ZeRO) ReduceDuringBackward() error {
	if z.stage != 2 {
		return fmt.Errorf("dist: zero: reducing during backward is stage 2's")
	}
	if z.ov == nil {
		o := &overlap{k: max(bucketElems(z.bucketBytes), 1)}
		nb := (z.f.total + o.k - 1) / o.k
		o.fired, o.left = make([]bool, len(z.f.params)), make([]int, len(z.f.params))
		o.seen = make([]bool, len(z.f.params))
		o.waiting, o.reduced = make([]int, nb), make([]bool, nb)
		z.ov = o
		for i, p := range z.f.params {
			p.OnGradReady(func(*tensor.Tensor) { z.gradReady(i) })
		}
	}
	o := z.ov
	if o.armed {
		// Another pass of the same step (the next micro-batch).
		if o.err != nil {
			return o.err
		}
		o.pass++
	} else {
		o.pass = 1
		clear(o.seen)
	}
	for i := range o.fired {
		o.fired[i] = false
	}
	for b := range o.waiting {
		o.waiting[b], o.reduced[b] = 0, false
	}
	for i, p := range z.f.params {
		o.left[i] = 0
		if p.Len() == 0 {
			continue
		}
		lo, hi := o.buckets(z.f, i)
		for b := lo; b <= hi; b++ {
			o.waiting[b]++
		}
		o.left[i] = hi - lo + 1
	}
	o.err, o.armed = nil, true
	return nil
}

// gradReady is parameter i's OnGradReady hook.
func (z *ZeRO) gradReady(i int) {
	o := z.ov
	if o == nil || !o.armed || o.err != nil {
		return
	}
	if o.fired[i] {
		o.err = fmt.Errorf("dist: zero: %s completed twice in one backward (used inside a checkpointed segment and outside it?)", nameOf(z.f.params[i]))
		return
	}
	o.fired[i], o.seen[i] = true, true
	if z.f.params[i].Len() == 0 {
		return
	}
	lo, hi := o.buckets(z.f, i)
	for b := lo; b <= hi; b++ {
		if o.waiting[b]--; o.waiting[b] == 0 {
			if err := z.reduceBucket(b); err != nil {
				o.err = err
				return
			}
		}
	}
}

// reduceBucket all-reduces flat range b, keeps this rank's part in the
// shard gradients and releases the full gradients it finished.
func (z *ZeRO) reduceBucket(b int) error {
	o := z.ov
	lo, hi := b*o.k, min((b+1)*o.k, z.f.total)
	err := tensor.Catch(func() error {
		if o.buf == nil {
			var err error
			if o.buf, err = tensor.New(z.dev, tensor.F32, []int{o.k}, memory.Temporary); err != nil {
				return err
			}
		}
		s := tempScope()
		defer s.Close()
		buf := s.Narrow(o.buf, 0, 0, hi-lo)
		z.f.gather(s, buf, lo, hi, func(i int) *tensor.Tensor { return z.f.params[i].Grad() })
		if err := z.comm.AllReduce(buf, Avg); err != nil {
			return err
		}
		// The owned part goes into the views' own gradient buffers.
		for j, v := range z.views {
			sg := z.viewOf[j]
			a, e := max(sg.pos, lo), min(sg.pos+sg.n, hi)
			if a >= e {
				continue
			}
			if v.Grad() == nil {
				// The gradient's dtype is the parameter's (BF16
				// weights have BF16 gradients): the average is
				// rounded to nearest into it. Zeros: a later pass
				// adds its ranges to it.
				g, err := tensor.Full(z.dev, v.DType(), v.Shape(), 0, memory.Gradient)
				if err != nil {
					return err
				}
				v.SetGrad(g)
			}
			dst := slice(s, v.Grad(), a-sg.pos, e-a)
			if o.pass > 1 {
				addInto(s, dst, s.Narrow(buf, 0, a-lo, e-a))
			} else {
				assign(s, dst, s.Narrow(buf, 0, a-lo, e-a))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dist: zero: all-reduce of flat range [%d, %d): %w", lo, hi, err)
	}
	o.reduced[b] = true
	for _, sg := range z.f.segments(lo, hi) {
		p := z.f.params[sg.i]
		if o.left[sg.i]--; o.left[sg.i] == 0 {
			p.SetGrad(nil)
		} else if g := p.Grad(); g != nil {
			// The gradient lives on for its other buckets, and the
			// next pass accumulates into it: this range is reduced.
			err := tensor.Catch(func() error {
				s := tempScope()
				defer s.Close()
				slice(s, g, sg.a, sg.n).Fill(0)
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// finishOverlap is ReduceGradients after an armed backward: it reduces
// the buckets backward did not complete (parameters without a gradient
// read as zeros), in bucket order, and agrees on which parameters had a
// gradient on any rank (the others' views get none and are not stepped).
func (z *ZeRO) finishOverlap() error {
	o := z.ov
	defer z.disarm()
	fail := func(err error) error {
		z.dropShardGrads()
		for _, p := range z.f.params {
			p.SetGrad(nil)
		}
		return err
	}
	if o.err != nil {
		return fail(o.err)
	}
	// What each rank lacks, reduced by Min: lacking everywhere is 1, and
	// a collective that returns zeros (a plan's, on the meta device)
	// reads as present everywhere (see syncPresence).
	missing := make([]float32, len(z.f.params))
	for i, p := range z.f.params {
		if !o.seen[i] && p.Grad() == nil {
			missing[i] = 1
		}
	}
	t, err := tensor.FromFloat32(z.dev, missing, []int{len(missing)}, memory.Temporary)
	if err != nil {
		return fail(err)
	}
	err = z.comm.AllReduce(t, Min)
	missing = t.Float32s()
	t.Release()
	if err != nil {
		return fail(fmt.Errorf("dist: zero: %w", err))
	}
	for b, done := range o.reduced {
		if !done {
			if err := z.reduceBucket(b); err != nil {
				return fail(err)
			}
		}
	}
	for j, v := range z.views {
		if missing[z.viewOf[j].i] != 0 {
			v.SetGrad(nil)
		}
	}
	for _, p := range z.f.params {
		if p.Grad() != nil {
			return fail(errors.New("dist: zero: a parameter kept its full gradient after the reduction"))
		}
	}
	return nil
}

// disarm ends an armed pass and frees the bucket.
func (z *ZeRO) disarm() {
	if z.ov == nil {
		return
	}
	z.ov.armed = false
	if z.ov.buf != nil {
		z.ov.buf.Release()
		z.ov.buf = nil
	}
}
