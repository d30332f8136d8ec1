package offload

// SetAsyncPrefetch turns asynchronous prefetching on or off and returns
// a function that restores the setting.
func SetAsyncPrefetch(on bool) func() {
	old := asyncPrefetch
	asyncPrefetch = on
	return func() { asyncPrefetch = old }
}
