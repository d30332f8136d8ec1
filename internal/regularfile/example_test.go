package regularfile_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/memfit/memfit/internal/regularfile"
)

// A config named by the user is read only if it is a regular file of a
// sensible size; a directory in its place is refused by kind.
func ExampleRead() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	config := filepath.Join(dir, "config.json")
	os.WriteFile(config, []byte(`{"n_layer": 2}`), 0o644)

	b, err := regularfile.Read(config, 1<<20)
	fmt.Printf("%s %v\n", b, err)

	_, err = regularfile.Read(dir, 1<<20)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		fmt.Println(pe.Err)
	}
	// Output:
	// {"n_layer": 2} <nil>
	// a directory, not a regular file
}
