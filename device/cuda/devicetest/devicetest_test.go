package devicetest_test

import (
	"testing"

	"github.com/memfit/memfit/device/cpu"
	"github.com/memfit/memfit/device/cuda/devicetest"
)

// TestCPUAgainstItself runs the suite with the CPU device on both sides:
// it checks the suite itself (every case runs, reads back and compares, and
// the accounting checks hold), since no other device is always present.
func TestCPUAgainstItself(t *testing.T) {
	devicetest.Run(t, cpu.New(), cpu.New(cpu.Threads(1)))
}
