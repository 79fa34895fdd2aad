package grain

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/granaryio/granary/internal/grainrt"
)

// Context is what a grain method, hook or timer runs with. It is a
// context.Context that carries the call's deadline and the caller's
// cancellation, and it gives the grain its identity and the runtime's
// services. It is valid only on the goroutine running the method, until the
// method returns.
type Context interface {
	context.Context

	// ID is the grain's identity.
	ID() ID
	// ActivationID tells this activation from earlier and later ones of the
	// same grain: it is unique within the silo's lifetime.
	ActivationID() uint64
	// CallChain lists the grains whose calls led to this one, outermost
	// first; it is empty for a call from outside any grain.
	CallChain() []ID
	// Caller sends calls to other grains (or to this one) on behalf of this
	// grain: build references from it. A grain may keep such references
	// (to other grains, to observers) in its state for its later calls:
	// a call is made on behalf of the method whose Context it is passed
	// (or a context derived from it), so pass the running method's.
	Caller() Caller
	// Logger logs with the grain's ID attached.
	Logger() *zap.Logger

	// RegisterTimer starts a timer whose ticks run fn as turns of this
	// activation: the first after due, then every period after the previous
	// tick finished (period 0: once). Ticks never overlap each other. Unless
	// Interleave is given they do not interleave with requests either, and
	// unless KeepAlive is given they do not keep the activation from being
	// collected. The timer ends with the activation.
	RegisterTimer(name string, fn TimerFunc, due, period time.Duration, opts ...TimerOption) (Timer, error)
	// RegisterReminder registers, or updates, the grain's reminder name:
	// it first fires after due, then every period, until it is
	// unregistered. The reminder is stored before RegisterReminder returns.
	// The grain must implement Remindable. period below the silo's minimum
	// fails with InvalidArgument; without a reminder service, with
	// FailedPrecondition; when the store cannot be reached, Unavailable.
	RegisterReminder(name string, due, period time.Duration) (Reminder, error)
	// UnregisterReminder removes the grain's reminder name; a tick already
	// delivered may still run. Removing one that does not exist is not an
	// error.
	UnregisterReminder(name string) error
	// Reminders lists the grain's reminders, as stored.
	Reminders() ([]Reminder, error)
	// DeactivateOnIdle asks the runtime to deactivate this activation as
	// soon as it has no request running or queued.
	DeactivateOnIdle()
	// DelayDeactivation keeps this activation from being collected for
	// being idle until at least d from now, as Orleans'
	// IGrainContext.DelayDeactivation: the activation is collected once it
	// has been idle for its collection age and the delay has run out. A
	// later call replaces the delay, even with a shorter d; d <= 0 cancels
	// it. It does not hold off DeactivateOnIdle, a deactivation asked for
	// by the silo, or the silo stopping.
	DelayDeactivation(d time.Duration)

	// Sleep waits for d, or until the context ends, without holding a
	// processor; other requests may interleave as at any await.
	Sleep(d time.Duration) error
	// Blocking runs fn, which may block on I/O, a lock or a channel,
	// without holding a processor.
	Blocking(fn func())
}

// FromContext returns the grain Context that ctx is or was derived from.
func FromContext(ctx context.Context) (Context, bool) {
	if c, ok := ctx.(Context); ok {
		return c, true
	}
	c, ok := ctx.Value(grainrt.ContextKey()).(Context)
	return c, ok
}

// Sleep is Context.Sleep when ctx belongs to a grain, and otherwise waits
// for d or for ctx to end. It returns ctx's error if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) error {
	if c, ok := FromContext(ctx); ok {
		return c.Sleep(d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Blocking is Context.Blocking when ctx belongs to a grain; otherwise it
// simply calls fn.
func Blocking(ctx context.Context, fn func()) {
	if c, ok := FromContext(ctx); ok {
		c.Blocking(fn)
		return
	}
	fn()
}

// TimerFunc is the code a timer runs on each tick.
type TimerFunc func(ctx Context) error

// A Timer is a running grain timer.
type Timer interface {
	// Change sets a new due time and period; the next tick is due after
	// due from now. It fails once the timer is stopped.
	Change(due, period time.Duration) error
	// Stop stops the timer; a tick already running finishes. Idempotent.
	Stop()
}

// TimerOption changes a timer: Interleave, KeepAlive.
type TimerOption func(*grainrt.TimerOptions)

// Interleave lets the timer's ticks interleave with requests at awaits.
func Interleave() TimerOption { return func(o *grainrt.TimerOptions) { o.Interleave = true } }

// KeepAlive makes each of the timer's ticks count as activity, so the
// activation is not collected for being idle while the timer runs. To keep
// every activation of a type alive for as long as the silo runs, register
// the type with WithKeepAlive instead.
func KeepAlive() TimerOption { return func(o *grainrt.TimerOptions) { o.KeepAlive = true } }
