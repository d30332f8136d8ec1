package train

import (
	"os"
	"path/filepath"
	"testing"
)

// A save removes the temporary files that killed saves of the same path
// left behind (each as large as a checkpoint), and nothing else.
func TestSaveRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x[1].st")
	stale := []string{".x[1].st.tmp123", ".x[1].st.tmp456"}
	keep := []string{".y.st.tmp1", "x[1].st.state", ".x[1].st.check7"}
	for _, n := range append(append([]string{}, stale...), keep...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFileAtomic(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	for _, n := range stale {
		if _, err := os.Stat(filepath.Join(dir, n)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after the save", n)
		}
	}
	for _, n := range keep {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s: %v (the save removed what was not its own)", n, err)
		}
	}
}
