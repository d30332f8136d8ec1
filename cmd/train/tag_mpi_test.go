//go:build mpi

package main

const mpiTagged = true
