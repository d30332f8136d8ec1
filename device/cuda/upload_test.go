//go:build cuda || cudaemu

package cuda

import (
	"bytes"
	"testing"

	"github.com/memfit/memfit/device"
	"github.com/memfit/memfit/memory"
)

// TestUploadAsync uploads two pieces of pinned host memory into one
// buffer on the copy stream, a kernel queued after AwaitUploads copies
// it, and the bytes read back are the host's; an upload out of range is
// an error, and a device with no upload yet awaits and syncs at once.
func TestUploadAsync(t *testing.T) {
	d := newTestDevice(t)
	if err := d.AwaitUploads(); err != nil {
		t.Fatal(err)
	}
	if err := d.SyncUploads(); err != nil {
		t.Fatal(err)
	}
	const n = 2 << 20
	h, err := d.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeHost(h)
	for i := range h {
		h[i] = byte(i*11 + 3)
	}
	src, _ := d.Alloc(n, memory.Parameter)
	dst, _ := d.Alloc(n, memory.Parameter)
	defer d.Free(src)
	defer d.Free(dst)
	if err := d.UploadAsync(src, 0, h[:n/2]); err != nil {
		t.Fatal(err)
	}
	if err := d.UploadAsync(src, n/2, h[n/2:]); err != nil {
		t.Fatal(err)
	}
	if err := d.UploadAsync(src, n/2+1, h[n/2:]); err == nil {
		t.Error("an upload past the buffer's end was queued")
	}
	if err := d.AwaitUploads(); err != nil {
		t.Fatal(err)
	}
	v := func(b device.Buffer) device.View {
		return device.View{Buf: b, DType: device.F32, Shape: []int{n / 4}, Strides: []int{1}}
	}
	d.Copy(v(dst), v(src)) // queued after AwaitUploads: sees both uploads
	if err := d.SyncUploads(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	d.Read(got, dst, 0)
	if !bytes.Equal(got, h) {
		t.Error("uploaded bytes differ")
	}
}
