// Package reminders is the silo's reminder service: it fires the
// reminders whose grains' ring positions the silo owns, reading them from
// a storage.ReminderTable that all the silos of a cluster share.
//
// # Ownership
//
// The silo tells the service the positions it owns (SetRanges, from the
// directory ring's arcs) whenever the membership changes. The reminders no
// longer owned stop at once; those newly owned are read from the table,
// the read retried every RetryInterval until it succeeds or the ranges
// change again. When a grain registers or unregisters a reminder, the silo
// writes the table and then tells the owner (Changed), which reads that
// grain's reminders again. Every RefreshInterval the service also reads all
// its ranges again and reconciles, which catches a change whose notice was
// lost. Table reads go one at a time, off the service's goroutine, so their
// results apply in the order they were made, and Stop cancels them.
//
// # Schedule
//
// A reminder with first tick f and period p ticks at f + k*p. When it is
// loaded at time now, its next tick is f if now <= f, else the first
// f + k*p >= now: ticks missed while no silo owned it are skipped, not
// replayed. Each tick calls Config.Fire with grain.TickStatus{FirstTick: f,
// Period: p, CurrentTick: the tick's due time}. The next tick is scheduled
// only when the tick's done is called: it is the first f + k*p strictly
// after the tick just delivered and at or after the time done was called.
// Ticks that came due while the tick ran are skipped, and counted in
// Stats.Skipped. A reminder changed while its tick runs (a new ETag) takes
// its new schedule when done comes; one removed, or no longer owned, while
// its tick runs is not scheduled again. A reminder whose period is not
// positive is not scheduled.
//
// # Design
//
// The schedule (schedule.go) is a pure core: a map of reminders and one
// min-heap by due time, with no clock, goroutine or I/O. The Service is its
// shell: one goroutine, the loop, owns the schedule and one clock timer,
// armed to the earliest of the next tick, the next refresh and the next
// retry, so that 100,000 reminders cost one timer. The exported methods
// queue work for the loop and return at once; done callbacks and table
// results come back the same way.
package reminders
