//go:build !race

package metrics

// raceEnabled: see race_test.go.
const raceEnabled = false
