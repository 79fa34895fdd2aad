//go:build !race

package activation

const raceEnabled = false
