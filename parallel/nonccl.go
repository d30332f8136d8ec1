//go:build !cuda

package parallel

import (
	"errors"
	"time"

	"github.com/memfit/memfit/device"
)

// NCCLOption configures NewNCCL.
type NCCLOption func()

// NCCLTimeout bounds how long a collective may take.
func NCCLTimeout(time.Duration) NCCLOption { return func() {} }

// NewNCCL needs a build with the cuda tag; without it, it says so.
func NewNCCL(Comm, device.Device, ...NCCLOption) (Comm, error) {
	return nil, errors.New("dist: NCCL needs a build with -tags cuda")
}
