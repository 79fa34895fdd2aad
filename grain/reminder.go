package grain

import "time"

// A Reminder is a persistent, periodic wake-up of a grain. Unlike a timer
// it is kept by the cluster's storage, not by an activation: it fires
// whether or not the grain is active (activating it to take the tick), and
// it outlives the activation, its silo and restarts of the cluster, until
// the grain unregisters it.
//
// Reminders are for periods of a minute or more (the silo's minimum is
// configurable); use a timer for finer ones. A tick that comes while the
// previous one still runs, or while no silo owns the reminder, is skipped,
// not queued: the next tick is the first one due after the previous one
// ended.
type Reminder struct {
	// Name tells the reminder from the grain's others.
	Name string
	// FirstTick is when the reminder first fires.
	FirstTick time.Time
	// Period is the time between ticks.
	Period time.Duration
	// ETag is the version of the stored reminder.
	ETag string
}

// TickStatus describes the tick a reminder delivers.
type TickStatus struct {
	// FirstTick is when the reminder first fired (or was due to).
	FirstTick time.Time
	// Period is the reminder's period.
	Period time.Duration
	// CurrentTick is when this tick was due; the runtime records how late
	// it is delivered.
	CurrentTick time.Time
}

// Remindable is implemented by grains that register reminders: the runtime
// calls ReceiveReminder as a request of the grain (it does not interleave
// with other requests unless the grain is reentrant), activating the grain
// if it is not active. A grain that does not implement it cannot register
// a reminder.
type Remindable interface {
	ReceiveReminder(ctx Context, name string, status TickStatus) error
}
