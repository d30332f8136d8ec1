//go:build cuda || cudaemu

package optim_test

import (
	"testing"

	"github.com/memfit/memfit/device/cuda"
)

// TestGroupedAdamMatchesPerParameterCUDA: k_adam_multi's updates are
// k_adam's bits through the optimizer (run on the emulator with
// -tags cudaemu, on a GPU with -tags cuda).
func TestGroupedAdamMatchesPerParameterCUDA(t *testing.T) {
	d, err := cuda.New(0)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	checkGroupedAdam(t, d)
}
