package memory

import (
	"errors"
	"strings"
	"testing"

	"github.com/memfit/memfit/internal/goldenfile"
)

// oomScenario fills a 6 GiB "cpu" device with parameters, gradients,
// activations and a little fragmentation, then asks for 2 GiB more.
func oomScenario(t *testing.T) (*Allocator, *OOMError) {
	t.Helper()
	a := New(NewCountingRaw(6*GiB, "cpu"))
	mustAlloc(t, a, 900*MiB, Parameter)
	mustAlloc(t, a, 300*MiB, Gradient)
	mustAlloc(t, a, 3*GiB, Activation)
	mustAlloc(t, a, 100*MiB, Activation)
	tmp := mustAlloc(t, a, 100*KiB, Temporary)
	mustAlloc(t, a, 1000, Temporary)
	a.Free(tmp) // a hole in a live small segment
	_, err := a.Alloc(2*GiB, Activation)
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("error %v, want *OOMError", err)
	}
	return a, oom
}

func TestOOMMessage(t *testing.T) {
	a, oom := oomScenario(t)
	s := a.Stats()
	if oom.Allocated != s.Allocated.Current || oom.Reserved != s.Reserved.Current || oom.Free != 6*GiB-s.Reserved.Current {
		t.Fatalf("OOMError numbers %+v disagree with stats %+v", oom, s)
	}
	if oom.ByCategory[Activation] != 3*GiB+100*MiB || oom.ByCategory[Temporary] != 1000 || oom.ByCategory[OptimizerState] != 0 {
		t.Fatalf("OOMError categories %v", oom.ByCategory)
	}
	msg := oom.Error()
	for _, want := range []string{
		"tried to allocate 2.00 GiB",
		"device cpu",
		"6.00 GiB capacity",
		FormatBytes(s.Allocated.Current) + " allocated",
		FormatBytes(s.Reserved.Current-s.Allocated.Current) + " reserved but unallocated",
		FormatBytes(6*GiB-s.Reserved.Current) + " free",
		FormatBytes(s.Reserved.Current) + " reserved)",
		"activation 3.10 GiB, parameter 900.00 MiB, gradient 300.00 MiB, temporary 1000 B",
		"try: -checkpoint sqrt, -amp bf16, -accum 4, a smaller -batch, -offload activations or -tile 2048",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("OOM message lacks %q:\n%s", want, msg)
		}
	}
	for _, absent := range []string{"optimizer_state", "data", "other"} {
		if strings.Contains(msg, absent) {
			t.Errorf("OOM message names empty category %q:\n%s", absent, msg)
		}
	}
	if got := oom.Categories(); len(got) != 4 || got[0] != Activation || got[3] != Temporary {
		t.Errorf("Categories() = %v", got)
	}
	goldenfile.Check(t, "oom.golden", msg+"\n")
}

func TestOOMHint(t *testing.T) {
	for _, tc := range []struct {
		largest Category
		hint    string
	}{
		{Activation, "-checkpoint sqrt, -amp bf16, -accum 4, a smaller -batch, -offload activations or -tile 2048"},
		{OptimizerState, "-optim sgd, -freeze <modules> or -offload optimizer"},
		{Gradient, "-freeze <modules> or -amp"},
		{Parameter, "a smaller model or -freeze"},
		{Data, "lower -prefetch"},
		{Temporary, "-accum 4, a smaller -batch or -tile 2048"},
		{Other, ""},
	} {
		t.Run(tc.largest.String(), func(t *testing.T) {
			a := New(NewCountingRaw(64*MiB, "meta"))
			second := Data
			if tc.largest == Data {
				second = Parameter
			}
			mustAlloc(t, a, 30*MiB, tc.largest)
			mustAlloc(t, a, 10*MiB, second)
			_, err := a.Alloc(40*MiB, Activation)
			if err == nil {
				t.Fatal("no OOM")
			}
			msg := err.Error()
			if !strings.Contains(msg, "held by "+tc.largest.String()+" 30.00 MiB, "+second.String()+" 10.00 MiB") {
				t.Errorf("message does not rank the categories:\n%s", msg)
			}
			if tc.hint == "" {
				if strings.Contains(msg, "try:") {
					t.Errorf("message for %s has a hint:\n%s", tc.largest, msg)
				}
			} else if !strings.Contains(msg, "; try: "+tc.hint) {
				t.Errorf("message lacks hint %q:\n%s", tc.hint, msg)
			}
		})
	}
}

// A hint never suggests an option that was already in effect when the
// request failed.
func TestOOMHintLeavesOutWhatWasTried(t *testing.T) {
	for _, tc := range []struct {
		tried []string
		want  string
	}{
		{nil, "; try: -checkpoint sqrt, -amp bf16, -accum 4, a smaller -batch, -offload activations or -tile 2048"},
		{[]string{"-accum"}, "; try: -checkpoint sqrt, -amp bf16, a smaller -batch, -offload activations or -tile 2048"},
		{[]string{"-accum", "-batch"}, "; try: -checkpoint sqrt, -amp bf16, -offload activations or -tile 2048"},
		{[]string{"-accum", "-batch", "-checkpoint"}, "; try: -amp bf16, -offload activations or -tile 2048"},
		{[]string{"-accum", "-batch", "-checkpoint", "-amp"}, "; try: -offload activations or -tile 2048"},
		{[]string{"-accum", "-batch", "-checkpoint", "-amp", "-offload activations"}, "; try: -tile 2048"},
		{[]string{"-accum", "-batch", "-checkpoint", "-amp", "-offload activations", "-tile"}, "; -accum, -batch, -checkpoint, -amp, -offload activations, -tile did not make it fit: try a smaller model or -batch"},
	} {
		t.Run(strings.Join(tc.tried, ","), func(t *testing.T) {
			e := &OOMError{Requested: MiB, Size: MiB, Capacity: 64 * MiB, Device: "meta", Tried: tc.tried}
			e.ByCategory[Activation] = 60 * MiB
			if msg := e.Error(); !strings.HasSuffix(msg, tc.want) {
				t.Errorf("tried %v:\n%s\nwant it to end %q", tc.tried, msg, tc.want)
			}
		})
	}
}

func TestOOMEmptyDevice(t *testing.T) {
	a := New(NewCountingRaw(MiB, "meta"))
	_, err := a.Alloc(2*MiB, Parameter)
	want := "memory: out of memory: tried to allocate 2.00 MiB (device meta; 1.00 MiB capacity; 0 B allocated; " +
		"0 B reserved but unallocated; 1.00 MiB free; 0 B reserved); the request alone exceeds the capacity: try a smaller -batch or model"
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}
