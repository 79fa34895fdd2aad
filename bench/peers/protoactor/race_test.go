//go:build race

package protoactor

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = true
