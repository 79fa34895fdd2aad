package grainrt

// TimerOptions are a timer's settings, which grain.TimerOption sets.
type TimerOptions struct {
	// Interleave lets ticks run while a request awaits, and lets requests
	// start while a tick awaits.
	Interleave bool
	// KeepAlive makes each tick count as activity, so the activation is not
	// collected while the timer runs.
	KeepAlive bool
}
