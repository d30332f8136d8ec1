//go:build !unix

package tokenizer

import "os"

// openFlags: without Unix FIFOs, a plain open does not block.
const openFlags = os.O_RDONLY
