package nn

import (
	"fmt"
	"os"
	"sync"

	"github.com/memfit/memfit/tensor"
)

// Warn receives the library's one-time advice (the inference hint). It
// prints to standard error unless replaced.
var Warn = func(msg string) { fmt.Fprintln(os.Stderr, "memfit:", msg) }

var inference struct {
	sync.Mutex
	pending  bool  // an eval-mode forward recorded a graph
	backward int64 // tensor.BackwardCalls when it did
	warned   bool
}

// CheckInference is called by models at the start of Forward. When a
// forward in eval mode (Run.Train false) records a graph and the next such
// forward comes without a backward in between, the graph was kept for
// nothing: it says once that a NoGrad scope would free it.
func CheckInference(r *Run) {
	if r.Train || !r.Grad() {
		return
	}
	inference.Lock()
	defer inference.Unlock()
	calls := tensor.BackwardCalls()
	if inference.pending && calls == inference.backward && !inference.warned {
		inference.warned = true
		Warn("an eval-mode forward recorded a graph that no backward used; run inference in a tensor.NoGrad() scope (nn.Eval) so each activation is freed as soon as it is consumed")
	}
	inference.pending, inference.backward = true, calls
}
