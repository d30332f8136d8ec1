// Package goldenfile compares test output with files under testdata and
// rewrites them when tests run with -update, as go/printer's tests do. It
// is imported by tests only; its one flag, -update, is registered for
// every test binary that uses it.
package goldenfile

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Check compares got with testdata/name, or rewrites the file with -update.
func Check(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (rerun with -update if the change is meant):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
