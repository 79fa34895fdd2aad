//go:build race

package activation

// raceEnabled randomises scheduling choices under the race detector, as the
// Go runtime does, so tests cannot depend on an order the pool does not
// promise.
const raceEnabled = true
