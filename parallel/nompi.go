//go:build !mpi

package parallel

import (
	"errors"
	"time"
)

// MPIOption configures NewMPI.
type MPIOption func()

// MPITimeout sets the watchdog of NewMPI's collectives.
func MPITimeout(time.Duration) MPIOption { return func() {} }

// NewMPI needs a build with the mpi tag; without it, it says so.
func NewMPI(...MPIOption) (Comm, error) {
	return nil, errors.New("dist: MPI needs a build with -tags mpi (apt-get install libopenmpi-dev openmpi-bin; go build -tags mpi ./cmd/train)")
}
