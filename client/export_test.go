package client

// SetOfferHook has f run after each offer of a call has gone to the
// transport and before the client records where it went; it returns
// the function that removes f. Not for parallel tests.
func SetOfferHook(f func(attempt int)) (restore func()) {
	offerHook = f
	return func() { offerHook = nil }
}

// SetCancelHook has f run each time a call's cancellation has read where
// the call went; it returns the function that removes f.
func SetCancelHook(f func()) (restore func()) {
	cancelHook = f
	return func() { cancelHook = nil }
}
