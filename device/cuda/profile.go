//go:build cuda || cudaemu

package cuda

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cuda/internal/cu"
)

// profiler times the device's GPU work between StartProfile and Profile:
// a pair of timing events around every kernel, product and copy, on the
// stream that runs it, and the host's wall time in each call that blocks
// on the GPU. It lives under the worker's lock.
type profiler struct {
	on        bool
	base      cu.Event // recorded on the compute stream at StartProfile
	marks     []profileMark
	free      []cu.Event
	waits     map[string]*HostWait
	truncated bool
}

type profileMark struct {
	name       string
	copy       bool // on the copy stream
	start, end cu.Event
}

// maxProfileMarks bounds a profile's events (two per operation): an 8B
// step makes some tens of thousands of launches.
const maxProfileMarks = 1 << 18

// event returns a timing event from the pool.
func (p *profiler) event() (cu.Event, error) {
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		return e, nil
	}
	return cu.MakeEvent(cu.DefaultEvent)
}

// timed runs fn, which queues one operation on stream s, between two
// timing events when a profile is being taken. It runs under the
// worker's lock.
func (d *Device) timed(name string, s cu.Stream, fn func() error) error {
	p := &d.prof
	if !p.on {
		return fn()
	}
	if len(p.marks) >= maxProfileMarks {
		p.truncated = true
		return fn()
	}
	start, err := p.event()
	if err != nil {
		return err
	}
	if err := start.Record(s); err != nil {
		return err
	}
	if err := fn(); err != nil {
		p.free = append(p.free, start)
		return err
	}
	end, err := p.event()
	if err != nil {
		return err
	}
	if err := end.Record(s); err != nil {
		return err
	}
	p.marks = append(p.marks, profileMark{name: name, copy: s == d.copies, start: start, end: end})
	return nil
}

// waited adds the host's time since t0, blocked in a call named name, to
// the profile being taken. It runs under the worker's lock.
func (d *Device) waited(name string, t0 time.Time) {
	p := &d.prof
	if !p.on {
		return
	}
	w := p.waits[name]
	if w == nil {
		w = &HostWait{Name: name}
		p.waits[name] = w
	}
	w.Calls++
	w.Time += time.Since(t0)
}

// StartProfile starts timing the device's work afresh (see [Profile]):
// every kernel, cuBLAS product and copy queued from now on is bracketed
// by timing events on its stream, and the host's time blocked in the
// driver is counted. Each operation costs two event records (about a
// microsecond each on the host).
func (d *Device) StartProfile() error {
	return d.wrap("start profile", d.w.do(func() error {
		p := &d.prof
		p.recycle()
		if p.base == (cu.Event{}) {
			var err error
			if p.base, err = cu.MakeEvent(cu.DefaultEvent); err != nil {
				return err
			}
		}
		if err := p.base.Record(d.compute); err != nil {
			return err
		}
		p.on, p.truncated = true, false
		p.waits = make(map[string]*HostWait)
		return nil
	}))
}

// destroy destroys every event the profiler made (at Close).
func (p *profiler) destroy() error {
	p.recycle()
	var errs []error
	for i := range p.free {
		errs = append(errs, cu.DestroyEvent(&p.free[i]))
	}
	p.free = nil
	if p.base != (cu.Event{}) {
		errs = append(errs, cu.DestroyEvent(&p.base))
	}
	p.on = false
	return errors.Join(errs...)
}

// recycle returns the marks' events to the pool.
func (p *profiler) recycle() {
	for _, m := range p.marks {
		p.free = append(p.free, m.start, m.end)
	}
	p.marks = p.marks[:0]
}

// Profile waits for the GPU and returns what was timed since
// StartProfile, and stops timing.
func (d *Device) Profile() (Profile, error) {
	var out Profile
	err := d.w.do(func() error {
		p := &d.prof
		if !p.on {
			return errors.New("no profile started")
		}
		p.on = false
		defer p.recycle()
		if err := d.compute.Synchronize(); err != nil {
			return err
		}
		if err := d.copies.Synchronize(); err != nil {
			return err
		}
		type key struct {
			name string
			copy bool
		}
		byKey := map[key]*OpTime{}
		var spans [][2]float64 // compute-stream intervals, ms after base
		for _, m := range p.marks {
			ms, err := m.start.Elapsed(m.end)
			if err != nil {
				return err
			}
			k := key{m.name, m.copy}
			o := byKey[k]
			if o == nil {
				o = &OpTime{Name: m.name, CopyStream: m.copy}
				byKey[k] = o
				out.Ops = append(out.Ops, o)
			}
			o.Calls++
			o.Time += msDuration(ms)
			if !m.copy {
				t0, err := p.base.Elapsed(m.start)
				if err != nil {
					return err
				}
				t1, err := p.base.Elapsed(m.end)
				if err != nil {
					return err
				}
				spans = append(spans, [2]float64{t0, t1})
			}
		}
		out.Span, out.Busy = union(spans)
		for _, w := range p.waits {
			out.HostWaits = append(out.HostWaits, *w)
		}
		out.Truncated = p.truncated
		return nil
	})
	if err != nil {
		return Profile{}, d.wrap("profile", err)
	}
	slices.SortFunc(out.Ops, func(a, b *OpTime) int { return cmp.Compare(b.Time, a.Time) })
	slices.SortFunc(out.HostWaits, func(a, b HostWait) int { return cmp.Compare(b.Time, a.Time) })
	return out, nil
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * 1e6) }

// union returns the end of the last interval and the length of the
// intervals' union, both from time 0.
func union(spans [][2]float64) (span, busy time.Duration) {
	slices.SortFunc(spans, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
	var total, end float64
	curStart, curEnd := 0.0, -1.0
	for _, s := range spans {
		end = max(end, s[1])
		if s[0] > curEnd {
			if curEnd > curStart {
				total += curEnd - curStart
			}
			curStart, curEnd = s[0], s[1]
			continue
		}
		curEnd = max(curEnd, s[1])
	}
	if curEnd > curStart {
		total += curEnd - curStart
	}
	return msDuration(end), msDuration(total)
}

// gemm queues one cuBLAS product (bg, the cuBLAS form of g) on the
// compute stream. It runs under the worker's lock.
func (d *Device) gemm(g device.Gemm, bg blasGemm) error {
	name := ""
	if d.prof.on {
		name = gemmName(g)
	}
	return d.timed(name, d.compute, func() error { return d.blas.gemm(bg) })
}

// gemmName is a product's name in a [Profile]: its types and shape in
// memfit's row-major terms.
func gemmName(g device.Gemm) string {
	s := fmt.Sprintf("gemm %v·%v→%v %d×%d×%d", g.A.DType, g.B.DType, g.C.DType, g.M, g.N, g.K)
	if g.Batch > 1 {
		s += fmt.Sprintf(" ×%d", g.Batch)
	}
	return s
}
