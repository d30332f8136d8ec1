// Package atomicfile replaces files so that a reader, or a crash, sees the
// old contents or the whole new ones, never a part: the new contents go to
// a temporary file in the same directory, which is synced, renamed over
// the path, and followed by a sync of the directory so that the rename
// itself survives a power loss.
//
// Write is that sequence around a callback that produces the contents;
// Rename is its last half, for a file another program has finished (a
// compiler's output). The temporary file is named "."+base+".tmp*" beside
// the path, so a caller that wants to clean up after a crash (train does,
// for checkpoints) can find what a killed write left behind.
package atomicfile
