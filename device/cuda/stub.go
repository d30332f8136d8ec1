//go:build !cuda && !cudaemu

package cuda

import (
	"errors"

	"github.com/memfit/memfit/device"
)

// Device is the CUDA device. In this build (without the cuda tag) none can
// be made: New always fails.
type Device struct {
	device.Device
}

// PinnedBuffer is page-locked host memory for fast, asynchronous copies to
// the device. In this build none can be made.
type PinnedBuffer struct{}

var errBuilt = errors.New(errNoCUDA)

// Available reports whether a CUDA device can be opened: never, in a build
// without the cuda tag.
func Available() bool { return false }

// New fails in a build without the cuda tag, saying how to rebuild.
func New(ordinal int, opts ...Option) (*Device, error) { return nil, errBuilt }

// Close does nothing.
func (d *Device) Close() error { return nil }

// Synchronize does nothing.
func (d *Device) Synchronize() error { return nil }

// NewPinned fails in a build without the cuda tag.
func (d *Device) NewPinned(n int) (*PinnedBuffer, error) { return nil, errBuilt }

// CopyAsync fails in a build without the cuda tag.
func (d *Device) CopyAsync(dst device.Buffer, off int64, src *PinnedBuffer, srcOff, n int64) error {
	return errBuilt
}

// Bytes is nil.
func (b *PinnedBuffer) Bytes() []byte { return nil }

// Wait does nothing.
func (b *PinnedBuffer) Wait() error { return nil }

// Close does nothing.
func (b *PinnedBuffer) Close() error { return nil }

// CountsLaunches is false: nothing runs in this build.
func (d *Device) CountsLaunches() bool { return false }

// ResetLaunchCounts does nothing.
func (d *Device) ResetLaunchCounts() {}

// LaunchCounts is empty.
func (d *Device) LaunchCounts() LaunchCounts { return LaunchCounts{} }
