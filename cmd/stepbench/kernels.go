package main

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/memfit/memfit/device"
)

// timedDevice wraps a device and adds the wall time of every kernel call to
// a table keyed by kernel, dtypes and (for products) shape, so that a step's
// time can be split the way a profiler's flat view cannot: the GEMM engine's
// worker goroutines are charged to the product that started them.
//
// The CPU device runs every kernel synchronously, so wall time per call is
// the kernel's cost there; on an asynchronous device it is launch time only.
type timedDevice struct {
	device.Device
	times   map[string]*kernelTime
	stopped bool
}

type kernelTime struct {
	calls int
	total time.Duration
}

func newTimedDevice(d device.Device) *timedDevice {
	return &timedDevice{Device: d, times: map[string]*kernelTime{}}
}

func (d *timedDevice) add(key string, t0 time.Time) {
	if d.stopped {
		return
	}
	k := d.times[key]
	if k == nil {
		k = &kernelTime{}
		d.times[key] = k
	}
	k.calls++
	k.total += time.Since(t0)
}

// visible is d as the trainer should see it: with the capabilities of
// the device it wraps and no others (the wrapper has a method for each).
func (d *timedDevice) visible() device.Device {
	var hide []string
	for _, c := range device.Capabilities {
		if !device.Has(d.Device, c) {
			hide = append(hide, c)
		}
	}
	if len(hide) == 0 {
		return d
	}
	return device.Without(d, hide...)
}

func (d *timedDevice) CausalAttention(out, lse, q, k, v device.View, a device.Attention) {
	defer d.add(fmt.Sprintf("attention %s %v dropout=%t", dt(q), q.Shape, a.Dropout > 0), time.Now())
	device.AttentionOf(d.Device).CausalAttention(out, lse, q, k, v, a)
}

func (d *timedDevice) CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v device.View, a device.Attention) {
	defer d.add(fmt.Sprintf("attention-backward %s %v dropout=%t", dt(q), q.Shape, a.Dropout > 0), time.Now())
	device.AttentionOf(d.Device).CausalAttentionBackward(dq, dk, dv, dout, out, lse, q, k, v, a)
}

// reset forgets the calls so far (the warm-up steps).
func (d *timedDevice) reset() { clear(d.times) }

// stop freezes the table.
func (d *timedDevice) stop() { d.stopped = true }

// report writes the table, largest total first, with each row's time per
// step and share of all kernel time.
func (d *timedDevice) report(w io.Writer, steps int) {
	keys := make([]string, 0, len(d.times))
	var all time.Duration
	for k, v := range d.times {
		keys = append(keys, k)
		all += v.total
	}
	sort.Slice(keys, func(i, j int) bool { return d.times[keys[i]].total > d.times[keys[j]].total })
	if steps < 1 {
		steps = 1
	}
	fmt.Fprintf(w, "%10s %6s %8s  %s\n", "ms/step", "share", "calls", "kernel")
	for _, k := range keys {
		v := d.times[k]
		fmt.Fprintf(w, "%10.2f %5.1f%% %8d  %s\n", ms(v.total)/float64(steps), 100*float64(v.total)/float64(all), v.calls/steps, k)
	}
	fmt.Fprintf(w, "%10.2f %6s %8s  all kernels\n", ms(all)/float64(steps), "", "")
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func dt(v device.View) string { return v.DType.String() }

func (d *timedDevice) Fill(dst device.View, v float64) {
	defer d.add(fmt.Sprintf("fill %s %v", dt(dst), dst.Shape), time.Now())
	d.Device.Fill(dst, v)
}

func (d *timedDevice) Copy(dst, src device.View) {
	defer d.add(fmt.Sprintf("copy %s->%s %v", dt(src), dt(dst), dst.Shape), time.Now())
	d.Device.Copy(dst, src)
}

func (d *timedDevice) Unary(op device.UnaryOp, dst, src device.View, arg float64) {
	defer d.add("unary "+op.String()+" "+dt(src)+"->"+dt(dst), time.Now())
	d.Device.Unary(op, dst, src, arg)
}

func (d *timedDevice) UnaryBackward(op device.UnaryOp, dx, x, y, dy device.View, arg float64) {
	defer d.add("unary-backward "+op.String()+" "+dt(dy)+"->"+dt(dx), time.Now())
	d.Device.UnaryBackward(op, dx, x, y, dy, arg)
}

func (d *timedDevice) Binary(op device.BinaryOp, dst, a, b device.View) {
	defer d.add(fmt.Sprintf("binary %s %s,%s->%s %v", op, dt(a), dt(b), dt(dst), dst.Shape), time.Now())
	d.Device.Binary(op, dst, a, b)
}

func (d *timedDevice) Reduce(op device.ReduceOp, dst, src device.View) {
	defer d.add(fmt.Sprintf("reduce %d %s %v->%v", op, dt(src), src.Shape, dst.Shape), time.Now())
	d.Device.Reduce(op, dst, src)
}

func (d *timedDevice) Gemm(g device.Gemm) {
	defer d.add(fmt.Sprintf("gemm %s->%s tA=%t tB=%t batch=%d m=%d n=%d k=%d beta=%g%s",
		dt(g.A), dt(g.C), g.TransA, g.TransB, g.Batch, g.M, g.N, g.K, g.Beta, triangleNames[g.Triangle]), time.Now())
	d.Device.Gemm(g)
}

func (d *timedDevice) Softmax(dst, src device.View, log bool) {
	defer d.add(fmt.Sprintf("softmax log=%t %s->%s", log, dt(src), dt(dst)), time.Now())
	device.Softmax(d.Device, dst, src, log)
}

func (d *timedDevice) SoftmaxBackward(dx, y, dy device.View, log bool) {
	defer d.add(fmt.Sprintf("softmax-backward log=%t %s,%s->%s", log, dt(y), dt(dy), dt(dx)), time.Now())
	device.SoftmaxBackward(d.Device, dx, y, dy, log)
}

func (d *timedDevice) LayerNorm(y, xc, mean, rstd, x, gamma, beta device.View, eps float64) {
	key := "layernorm " + dt(x) + "->" + dt(y)
	if xc.DType != device.Invalid {
		key += "," + dt(xc)
	}
	defer d.add(key, time.Now())
	device.LayerNorm(d.Device, y, xc, mean, rstd, x, gamma, beta, eps)
}

func (d *timedDevice) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma device.View) {
	defer d.add("layernorm-backward "+dt(dy)+"->"+dt(dx), time.Now())
	device.LayerNormBackward(d.Device, dx, dgamma, dbeta, dy, x, mean, rstd, gamma)
}

func (d *timedDevice) Gather(dst, table, idx device.View) {
	defer d.add("gather "+dt(table), time.Now())
	d.Device.Gather(dst, table, idx)
}

func (d *timedDevice) ScatterAdd(dst, idx, src device.View) {
	defer d.add("scatter-add "+dt(src)+"->"+dt(dst), time.Now())
	d.Device.ScatterAdd(dst, idx, src)
}

func (d *timedDevice) Im2Col(col, x device.View, g device.ConvGeom) {
	defer d.add("im2col "+dt(x), time.Now())
	d.Device.Im2Col(col, x, g)
}

func (d *timedDevice) Col2Im(dx, col device.View, g device.ConvGeom) {
	defer d.add("col2im "+dt(col), time.Now())
	d.Device.Col2Im(dx, col, g)
}

func (d *timedDevice) Pool(op device.PoolOp, y, argmax, x device.View, g device.ConvGeom) {
	defer d.add("pool "+dt(x), time.Now())
	d.Device.Pool(op, y, argmax, x, g)
}

func (d *timedDevice) PoolBackward(op device.PoolOp, dx, argmax, dy device.View, g device.ConvGeom) {
	defer d.add("pool-backward "+dt(dy), time.Now())
	d.Device.PoolBackward(op, dx, argmax, dy, g)
}

func (d *timedDevice) CrossEntropy(loss, logits, targets device.View, ignore int, smoothing float64) {
	defer d.add("cross-entropy "+dt(logits), time.Now())
	device.CrossEntropy(d.Device, loss, logits, targets, ignore, smoothing)
}

func (d *timedDevice) CrossEntropyBackward(dlogits, logits, targets, dloss device.View, ignore int, smoothing float64) {
	defer d.add("cross-entropy-backward "+dt(logits), time.Now())
	device.CrossEntropyBackward(d.Device, dlogits, logits, targets, dloss, ignore, smoothing)
}

func (d *timedDevice) Dropout(dst, src device.View, p float64, seed uint64) {
	defer d.add("dropout "+dt(src), time.Now())
	d.Device.Dropout(dst, src, p, seed)
}

func (d *timedDevice) Random(dst device.View, dist device.Distribution, a, b float64, seed uint64) {
	defer d.add("random "+dt(dst), time.Now())
	d.Device.Random(dst, dist, a, b, seed)
}

func (d *timedDevice) MaskedFill(dst, src, mask device.View, value float64) {
	defer d.add("masked-fill "+dt(src), time.Now())
	d.Device.MaskedFill(dst, src, mask, value)
}

func (d *timedDevice) CausalFill(dst, src device.View, value float64) {
	defer d.add("causal-fill "+dt(src)+"->"+dt(dst), time.Now())
	device.CausalFill(d.Device, dst, src, value)
}

func (d *timedDevice) AllFinite(src device.View) bool {
	defer d.add("all-finite "+dt(src), time.Now())
	return d.Device.AllFinite(src)
}

func (d *timedDevice) AdamStep(param, grad, m, v device.View, h device.AdamHyper) {
	defer d.add("adam "+dt(grad), time.Now())
	device.AdamStep(d.Device, param, grad, m, v, h)
}

func (d *timedDevice) AdamSteps(params, grads, ms, vs []device.View, h device.AdamHyper) {
	defer d.add("adam-group", time.Now())
	device.AdamSteps(d.Device, params, grads, ms, vs, h)
}

func (d *timedDevice) SGDStep(param, grad, momentum device.View, h device.SGDHyper) {
	defer d.add("sgd "+dt(grad), time.Now())
	device.SGDStep(d.Device, param, grad, momentum, h)
}

var triangleNames = [...]string{device.Full: "", device.LowerC: " lowerC", device.LowerA: " lowerA", device.UpperA: " upperA"}
