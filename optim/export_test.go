package optim

// SetChunkElems makes updates work n elements at a time and returns a
// function restoring the previous size.
func SetChunkElems(n int) (restore func()) {
	old := chunkElems
	chunkElems = n
	return func() { chunkElems = old }
}
