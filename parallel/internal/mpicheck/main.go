// Command mpicheck runs memfit's collectives, data-parallel training and
// ZeRO over MPI and checks them against single-process training. Build it
// with the mpi tag and launch it with mpirun (see package parallel):
//
//	go build -tags mpi -o /tmp/mpicheck ./parallel/internal/mpicheck
//	mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/mpicheck
//
// Without the mpi tag it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mpicheck:", err)
		os.Exit(1)
	}
}
