// Package safetensors reads and writes the safetensors format, the one
// place in memfit that knows it: Hugging Face imports and exports (hf),
// train's checkpoints and the tests that damage files on purpose
// (internal/sttest) all go through it. It imports only the standard
// library.
//
// A file is an 8-byte little-endian header length, a JSON header mapping
// each tensor's name to its dtype, shape and byte range in the data
// section (and "__metadata__" to string metadata), then the data,
// little-endian and row-major.
//
// Reading. Open memory-maps a file and checks its header before anything
// is allocated for the tensors, as the reference implementation does
// (ParseHeader): a bounded header length, UTF-8 JSON with no key twice, a
// known dtype, shapes whose element and byte counts do not overflow, byte
// ranges in order that cover the data section exactly: no overlap, no
// hole, no trailing byte. A tensor's Data aliases the map; Float32s widens
// F16 and BF16 exactly (and rounds F64), and any dtype's bytes (U8
// quantized weights, say) are there as they are. OpenIndex opens the
// shards that model.safetensors.index.json lists and checks that the index
// and the shards agree; OpenFiles opens files as one set. Anything but a
// regular file is refused before it is opened, so a FIFO never blocks a
// reader.
//
// Writing. Write streams a file to an io.Writer one tensor at a time: each
// Source gives its bytes, or a Fill callback that writes them when the
// writer reaches it, so an export holds one tensor at a time and never a
// second copy of the model. Making the file appear whole
// (internal/atomicfile) is the caller's part.
//
// Low level. Split, Frame, EncodeHeader and ParseHeader are the pieces
// Decode and Write are made of, for tests that write invalid files on
// purpose: EncodeHeader checks nothing, and Entry can describe any range.
package safetensors
