package reminders

import (
	"fmt"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Defaults of the Config fields left zero.
const (
	DefaultRefreshInterval = time.Minute
	DefaultRetryInterval   = time.Second
)

// Config configures a Service. New fills the zero fields with the defaults
// given, and rejects a Config with a field out of range, naming it.
type Config struct {
	// Table keeps the reminders. Required.
	Table storage.ReminderTable

	// Clock drives the ticks, the refresh and the retries. Tests pass a
	// fake clock and advance it. Default: the real clock.
	Clock clockwork.Clock

	// Logger receives table read failures. Default: a no-op logger.
	Logger *zap.Logger

	// RefreshInterval is how often the service reads all its ranges from
	// the table again and reconciles, which catches a change whose notice
	// (Changed) was lost. Default 1 minute.
	RefreshInterval time.Duration

	// RetryInterval is how soon a failed table read is tried again.
	// Default 1 second.
	RetryInterval time.Duration

	// Fire delivers a tick: the silo calls the grain. Required. It is
	// called on the service's goroutine, so it must not block; it calls
	// done exactly once when the grain's call has ended, from any
	// goroutine, possibly before Fire returns; a second call panics. The
	// next tick of the reminder is not scheduled until done is called.
	// Fire may call the Service's methods, but Stop.
	Fire func(e storage.ReminderEntry, st grain.TickStatus, done func(err error))
}

// DefaultConfig returns a Config with every default filled in. Table and
// Fire, which have none, are left for the caller.
func DefaultConfig() Config {
	return Config{
		Clock:           clockwork.NewRealClock(),
		Logger:          zap.NewNop(),
		RefreshInterval: DefaultRefreshInterval,
		RetryInterval:   DefaultRetryInterval,
	}
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = d.RefreshInterval
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
	return c
}

// validate reports the first field of c out of range, as
// "reminders: config: <Field>: <reason>".
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("reminders: config: %s: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Table == nil:
		return bad("Table", "required")
	case c.Fire == nil:
		return bad("Fire", "required")
	case c.RefreshInterval < 0:
		return bad("RefreshInterval", "%v is negative", c.RefreshInterval)
	case c.RetryInterval < 0:
		return bad("RetryInterval", "%v is negative", c.RetryInterval)
	}
	return nil
}
