package tensor_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/meta"
	"github.com/memfit/memfit/memory"
	"github.com/memfit/memfit/tensor"
)

// TestParkFetchUnfetch: a parked weight lives on the host with its
// values (readable and writable there), an op that meets it with the
// device's tensors is an error, and a backward that saved it before it
// went home runs on the values fetched again, with the gradients of a
// run that never parked; the bytes are where they should be at each
// moment, and releasing the weight frees both sides.
func TestParkFetchUnfetch(t *testing.T) {
	dev, host := cpu.New(), cpu.New(cpu.Label("host"))
	vals := []float32{1, 0, -1, 2, 0.5, 3}
	x, _ := tensor.FromFloat32(dev, []float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, memory.Data)
	defer x.Release()
	grad := func(park bool) []float32 {
		w, _ := tensor.FromFloat32(dev, vals, []int{2, 3}, memory.Parameter)
		w.SetName("w")
		defer w.Release()
		if park {
			if err := w.Park(host); err != nil {
				t.Fatal(err)
			}
			if !w.Parked() || w.Fetched() || w.Device() != host {
				t.Fatalf("parked %v fetched %v on %s", w.Parked(), w.Fetched(), w.Device().Name())
			}
			if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 0 {
				t.Errorf("device parameter bytes %d while parked, want 0", got)
			}
			if got := host.Memory().Stats().Category(memory.Parameter).Current; got != 24 {
				t.Errorf("host parameter bytes %d while parked, want 24", got)
			}
			if got := w.Float32s(); !slices.Equal(got, vals) {
				t.Errorf("parked values %v, want %v", got, vals)
			}
			if err := w.Fetch(); err != nil {
				t.Fatal(err)
			}
		}
		xg, _ := tensor.FromFloat32(dev, []float32{1, 2, 3, 4, 5, 6}, []int{2, 3}, memory.Data)
		xg.SetRequiresGrad(true)
		defer xg.Release()
		err := tensor.Step(func(s *tensor.Scope) error {
			y := s.Linear(xg, w, nil)
			l := s.Sum(s.Mul(y, y), false)
			if park {
				v := w.Version()
				if err := w.Unfetch(); err != nil {
					return err
				}
				if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 0 {
					t.Errorf("device parameter bytes %d after Unfetch, want 0", got)
				}
				var te *tensor.Error
				err := tensor.Catch(func() error { s.Linear(x, w, nil); return nil })
				if !errors.As(err, &te) || !strings.Contains(err.Error(), "different devices") {
					t.Errorf("an op on the device with a parked weight: %v, want a *tensor.Error naming the devices", err)
				}
				if err := w.Fetch(); err != nil {
					return err
				}
				if w.Version() != v || w.Device() != dev {
					t.Errorf("fetched: version %d (want %d), on %s", w.Version(), v, w.Device().Name())
				}
			}
			l.Backward()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return xg.Grad().Float32s()
	}
	want := grad(false)
	if got := grad(true); !slices.Equal(got, want) {
		t.Errorf("gradient %v with the weight parked and fetched again, want %v", got, want)
	}
	for _, d := range []device.Device{dev, host} {
		if got := d.Memory().Stats().Category(memory.Parameter).Current; got != 0 {
			t.Errorf("%s holds %d parameter bytes after the weight's release", d.Name(), got)
		}
	}
}

// TestParkedWrites: a parked weight written on the host is fetched with
// the new values; one written while fetched takes its values home at
// Unfetch; a fetch left undone frees the device's copy.
func TestParkedWrites(t *testing.T) {
	dev, host := cpu.New(), cpu.New(cpu.Label("host"))
	w, _ := tensor.FromFloat32(dev, []float32{1, 2, 3, 4}, []int{4}, memory.Parameter)
	defer w.Release()
	if err := w.Park(host); err != nil {
		t.Fatal(err)
	}
	if err := w.Park(host); err == nil {
		t.Error("parked twice")
	}
	if err := w.Evict(); err == nil {
		t.Error("a parked weight was evicted")
	}
	if err := w.SetFloat32s([]float32{5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	if err := w.Fetch(); err != nil {
		t.Fatal(err)
	}
	if got := w.Float32s(); !slices.Equal(got, []float32{5, 6, 7, 8}) {
		t.Errorf("fetched %v after a write at home", got)
	}
	if err := w.SetFloat32s([]float32{9, 10, 11, 12}); err != nil {
		t.Fatal(err)
	}
	if err := w.Unfetch(); err != nil {
		t.Fatal(err)
	}
	if got := w.Float32s(); !slices.Equal(got, []float32{9, 10, 11, 12}) {
		t.Errorf("home %v after a write while fetched", got)
	}
	_, _, _, done, err := w.FetchLater()
	if err != nil {
		t.Fatal(err)
	}
	if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 16 {
		t.Errorf("device bytes %d during a fetch", got)
	}
	if err := done(errors.New("copy failed")); err == nil || w.Fetched() {
		t.Errorf("an undone fetch: %v, fetched %v", err, w.Fetched())
	}
	if got := dev.Memory().Stats().Category(memory.Parameter).Current; got != 0 {
		t.Errorf("device bytes %d after an undone fetch", got)
	}
	if err := w.Unfetch(); err == nil {
		t.Error("unfetched a parked weight")
	}
	g, _ := tensor.FromFloat32(dev, []float32{1}, []int{1}, memory.Parameter)
	defer g.Release()
	g.SetRequiresGrad(true)
	if err := g.Park(host); err == nil {
		t.Error("a trainable tensor was parked")
	}
}

// TestParkQuantized: an NF4 weight parks and fetches as its bytes, on a
// planning device too, and its storage is released fetched.
func TestParkQuantized(t *testing.T) {
	for _, c := range []struct {
		name      string
		dev, host device.Device
	}{
		{"cpu", cpu.New(), cpu.New(cpu.Label("host"))},
		{"meta", meta.New(0), meta.New(0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			vals := make([]float32, 256)
			for i := range vals {
				vals[i] = float32(i%17) - 8
			}
			w, err := tensor.QuantizeFloat32(c.dev, tensor.NF4, vals, []int{4, 64}, memory.Parameter)
			if err != nil {
				t.Fatal(err)
			}
			bytes := c.dev.Memory().Stats().Category(memory.Parameter).Current
			var want []float32
			if device.StoresValues(c.dev) {
				want = w.Float32s()
			}
			if err := w.Park(c.host); err != nil {
				t.Fatal(err)
			}
			if got := c.host.Memory().Stats().Category(memory.Parameter).Current; got != bytes {
				t.Errorf("host bytes %d, want %d", got, bytes)
			}
			if err := w.Fetch(); err != nil {
				t.Fatal(err)
			}
			if got := c.dev.Memory().Stats().Category(memory.Parameter).Current; got != bytes {
				t.Errorf("device bytes %d fetched, want %d", got, bytes)
			}
			if want != nil {
				if got := w.Float32s(); !slices.Equal(got, want) {
					t.Errorf("fetched values differ")
				}
			}
			w.Release()
			for _, d := range []device.Device{c.dev, c.host} {
				if got := d.Memory().Stats().Requested.Current; got != 0 {
					t.Errorf("%s holds %d bytes after the release", d.Name(), got)
				}
			}
		})
	}
}
