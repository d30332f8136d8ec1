//go:build !mpi

package main

import "errors"

func run() error { return errors.New("built without the mpi tag: go build -tags mpi") }
