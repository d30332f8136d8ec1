//go:build cuda || cudaemu

package cuda

import (
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// TestProfile: between StartProfile and Profile every kernel, product and
// copy is counted under its name with its calls, the compute stream's busy
// time is within the span, a blocking read is a host wait, and work
// before StartProfile or after Profile is not counted.
func TestProfile(t *testing.T) {
	d := newTestDevice(t)
	const n = 64
	buf := func() (device.Buffer, device.View) {
		b, err := d.Alloc(4*n*n, memory.Activation)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(b) })
		return b, device.View{Buf: b, DType: device.F32, Shape: []int{n, n}, Strides: []int{n, 1}}
	}
	_, a := buf()
	_, b := buf()
	cb, c := buf()
	d.Fill(a, 1) // before the profile: not counted
	if err := d.StartProfile(); err != nil {
		t.Fatal(err)
	}
	d.Fill(a, 0.5)
	d.Fill(b, 2)
	d.Gemm(device.Gemm{Batch: 1, M: n, N: n, K: n, A: a, B: b, C: c, LDA: n, LDB: n, LDC: n, Alpha: 1})
	d.Write(cb, 0, make([]byte, 16))
	got := make([]byte, 4)
	d.Read(got, cb, 0)
	p, err := d.Profile()
	if err != nil {
		t.Fatal(err)
	}
	d.Fill(a, 3) // after: not counted
	calls := map[string]int64{}
	for _, o := range p.Ops {
		calls[o.Name] += o.Calls
		if o.Time < 0 {
			t.Errorf("%s: negative time %v", o.Name, o.Time)
		}
	}
	want := map[string]int64{"k_fill_f32": 2, "gemm f32·f32→f32 64×64×64": 1, "HtoD": 1, "DtoH": 1}
	for name, n := range want {
		if calls[name] != n {
			t.Errorf("%s: %d calls, want %d (profile %v)", name, calls[name], n, calls)
		}
	}
	if len(calls) != len(want) {
		t.Errorf("profiled %v, want only %v", calls, want)
	}
	if p.Busy <= 0 || p.Busy > p.Span {
		t.Errorf("busy %v of span %v", p.Busy, p.Span)
	}
	waits := map[string]int64{}
	for _, w := range p.HostWaits {
		waits[w.Name] += w.Calls
	}
	if waits["cuMemcpyDtoH"] != 1 {
		t.Errorf("host waits %v, want one cuMemcpyDtoH", waits)
	}
	if _, err := d.Profile(); err == nil {
		t.Error("a second Profile without StartProfile: no error")
	}
}

// TestUnion: the busy time of overlapping and disjoint intervals.
func TestUnion(t *testing.T) {
	for _, tc := range []struct {
		spans      [][2]float64
		span, busy float64 // ms
	}{
		{nil, 0, 0},
		{[][2]float64{{1, 2}}, 2, 1},
		{[][2]float64{{1, 2}, {3, 5}}, 5, 3},
		{[][2]float64{{3, 5}, {1, 4}}, 5, 4},
		{[][2]float64{{1, 6}, {2, 3}, {7, 8}}, 8, 6},
	} {
		span, busy := union(tc.spans)
		if span != msDuration(tc.span) || busy != msDuration(tc.busy) {
			t.Errorf("union(%v) = %v, %v; want %vms, %vms", tc.spans, span, busy, tc.span, tc.busy)
		}
	}
}
