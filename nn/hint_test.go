package nn

import (
	"strings"
	"testing"

	"github.com/memfit/memfit/tensor"
)

func TestInferenceHint(t *testing.T) {
	var got []string
	old := Warn
	Warn = func(m string) { got = append(got, m) }
	defer func() { Warn = old }()
	inference.pending, inference.warned = false, false

	s := tensor.NewScope(tensor.NoGrad())
	for range 3 {
		CheckInference(Eval(s)) // inference mode: fine
	}
	rec := tensor.NewScope()
	CheckInference(&Run{Scope: rec}) // eval mode, recording
	if len(got) != 0 {
		t.Fatalf("warned too early: %v", got)
	}
	CheckInference(&Run{Scope: rec}) // again, no backward in between
	CheckInference(&Run{Scope: rec})
	if len(got) != 1 || !strings.Contains(got[0], "NoGrad") {
		t.Fatalf("warnings %q, want one naming NoGrad", got)
	}
}
