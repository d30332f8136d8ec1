package tensor

// SetLMHeadSumBytes makes LinearCrossEntropy sum a 16-bit weight's
// gradient in parts of at most n bytes and returns a function restoring
// the bound.
func SetLMHeadSumBytes(n int64) (restore func()) {
	old := lmHeadSumBytes
	lmHeadSumBytes = n
	return func() { lmHeadSumBytes = old }
}
