//go:build !unix

package main

import "testing"

func mkfifo(t *testing.T, path string) string {
	t.Helper()
	t.Skip("no FIFOs on this system")
	return path
}
