package silo

import (
	"fmt"
	"net"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Config configures a Silo. Start from DefaultConfig and change what you
// need; New rejects a Config with a field out of range and names it.
type Config struct {
	// Name names the silo in logs. Default "silo".
	Name string

	// Scheduler configures the pool that runs every activation's turns.
	// Its Logger defaults to the silo's. Its Clock does not: the
	// scheduler's monitor measures how long turns run, which a fake clock
	// that tests advance by minutes would misreport.
	Scheduler activation.Config

	// ResponseTimeout bounds a call that neither its method (the timeout
	// method option) nor its caller (grain.WithTimeout, a context
	// deadline) bounds more tightly. Default 30 s, as in Orleans.
	ResponseTimeout time.Duration

	// TimeoutResolution is the granularity of call timeouts: a call times
	// out within one TimeoutResolution after its deadline (a caller's
	// context deadline is exact). Coarser costs less idle CPU; finer, more.
	// Default 10 ms.
	TimeoutResolution time.Duration

	// TimerResolution is the granularity of grain timers: a tick runs up
	// to one TimerResolution after it is due, and ticks due within one
	// TimerResolution of each other are queued together. Coarser costs
	// less CPU with many timers; finer, more. Default 1 ms.
	TimerResolution time.Duration

	// CollectionAge is how long an activation may go without a call before
	// it is collected, for types that set no age of their own. Default
	// 15 min, as in Orleans.
	CollectionAge time.Duration

	// CollectionInterval is how often the collector looks for idle
	// activations of types that set no interval of their own: an idle
	// activation lives between CollectionAge and CollectionAge plus
	// CollectionInterval, give or take the scheduling of the collector and
	// of the deactivation (milliseconds on a machine that keeps up).
	// Default 1 min, as in Orleans.
	CollectionInterval time.Duration

	// Types overrides collection per grain type, keyed by type name.
	Types map[string]TypeConfig

	// MaxCallChain bounds how many grains deep a chain of calls may go; a
	// call past it fails with ResourceExhausted. It stops runaway
	// recursion between reentrant grains. Default 256.
	MaxCallChain int

	// StopDeactivationTimeout is the deadline of the Context that
	// OnDeactivate runs with: a hook that respects its context ends by
	// then. Stop itself is bounded by its own context. Default 10 s.
	StopDeactivationTimeout time.Duration

	// CloseTimeout bounds how long Close, and a Stop whose context ended,
	// wait for turns still running. A turn that outlives it is logged with
	// its grain, method, age and stack, then abandoned: its goroutine is
	// left to finish on its own and whatever it returns is discarded.
	// Default 10 s.
	CloseTimeout time.Duration

	// IncomingFilters run around every request a grain on this silo
	// receives, the first outermost.
	IncomingFilters []grain.IncomingFilter
	// OutgoingFilters run around every call sent through this silo's
	// callers, the first outermost.
	OutgoingFilters []grain.OutgoingFilter

	// AdminAddr is where the silo's admin HTTP server (package
	// silo/admin) is reached, host:port: gossiped to the cluster, so that
	// one silo's admin server can ask the others', and shown in Info.
	// Default "": none.
	AdminAddr string

	// Logger receives the silo's logs; grain loggers derive from it.
	// Default: a no-op logger.
	Logger *zap.Logger

	// Rejections counts and logs what the silo's listeners refuse (failed
	// handshakes, gossip under another key, malformed frames, failed
	// authentication): granary_rejected_total. Share one with the admin
	// server so that every refusal of the process is in one place.
	// Default: one of the silo's own, logging to Logger (see
	// Silo.Rejections).
	Rejections *security.Rejections

	// Clock drives call timeouts, timers, grain.Sleep and collection.
	// Tests pass a fake clock and advance it. Default: the real clock.
	Clock clockwork.Clock

	// Cluster, when set, makes the silo a member of a cluster: see
	// ClusterConfig. Nil (the default) runs a silo alone, where every
	// grain is activated here and no call leaves the process.
	Cluster *ClusterConfig

	// Gateway, when set, makes the silo serve external clients: see
	// GatewayConfig. Nil (the default) serves none.
	Gateway *GatewayConfig

	// Storage names the providers that keep grain state, as the grain
	// types' state declarations name them (grain.NewStateSpec);
	// grain.DefaultStorage ("default") is the provider of a declaration
	// that names none. The silo does not close them. A cluster's silos
	// must share their providers (storage/pgstore): an activation may move
	// to any silo.
	Storage map[string]storage.Provider
	// DataDir is the directory of the embedded store (a bbolt file named
	// EmbeddedStoreFile), which a silo alone opens as its default provider
	// when Storage has none and a state or the reminder service needs it.
	// It is made if missing. The file is locked: one silo per directory. A
	// silo in a cluster refuses it. Default "": no embedded store.
	DataDir string
	// Reminders, when set, runs the reminder service: see RemindersConfig.
	// Nil (the default): grains cannot register reminders.
	Reminders *RemindersConfig
}

// RemindersConfig sets up a silo's reminder service. Each silo fires the
// reminders of the grains whose ring positions it owns (the directory's
// ring; all of them for a silo alone) and takes over another's when the
// membership changes. Zero fields take the defaults given.
type RemindersConfig struct {
	// Table keeps the reminders; every silo of a cluster must use the same.
	// Default: the default storage provider (Storage["default"], or the
	// embedded store).
	Table storage.ReminderTable
	// MinPeriod is the shortest period a reminder may have: reminders are
	// for minutes and hours, timers for less. Default 1 minute.
	MinPeriod time.Duration
	// RefreshInterval is how often a silo reads its ranges' reminders
	// from the table again, which catches a change whose notice was lost.
	// Default 1 minute.
	RefreshInterval time.Duration
	// RetryInterval is how soon a failed read of the table is tried
	// again. Default 1 second.
	RetryInterval time.Duration
}

// DefaultMinReminderPeriod is RemindersConfig.MinPeriod's default.
const DefaultMinReminderPeriod = local.DefaultMinReminderPeriod

func (rc *RemindersConfig) validate() error {
	bad := func(field string, d time.Duration) error {
		return &ConfigError{Field: "Reminders." + field, Reason: fmt.Sprintf("%v must not be negative", d)}
	}
	switch {
	case rc.MinPeriod < 0:
		return bad("MinPeriod", rc.MinPeriod)
	case rc.RefreshInterval < 0:
		return bad("RefreshInterval", rc.RefreshInterval)
	case rc.RetryInterval < 0:
		return bad("RetryInterval", rc.RetryInterval)
	}
	return nil
}

// TypeConfig overrides the silo's collection settings for one grain type.
// Zero fields keep the type's own option or the silo default.
type TypeConfig struct {
	CollectionAge      time.Duration
	CollectionInterval time.Duration
}

// DefaultConfig returns the configuration described on each field.
func DefaultConfig() Config {
	sched := activation.DefaultConfig()
	sched.Logger = nil // New gives the scheduler the silo's logger
	return Config{
		Name:                    "silo",
		Scheduler:               sched,
		ResponseTimeout:         30 * time.Second,
		TimeoutResolution:       10 * time.Millisecond,
		TimerResolution:         time.Millisecond,
		CollectionAge:           15 * time.Minute,
		CollectionInterval:      time.Minute,
		MaxCallChain:            256,
		StopDeactivationTimeout: 10 * time.Second,
		CloseTimeout:            10 * time.Second,
	}
}

// ConfigError names the field of a Config that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "silo: config: " + e.Field + ": " + e.Reason }

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Name == "":
		return bad("Name", "must not be empty")
	case c.ResponseTimeout <= 0:
		return bad("ResponseTimeout", "%v must be positive", c.ResponseTimeout)
	case c.TimeoutResolution <= 0:
		return bad("TimeoutResolution", "%v must be positive", c.TimeoutResolution)
	case c.TimeoutResolution > c.ResponseTimeout:
		return bad("TimeoutResolution", "%v must not exceed ResponseTimeout %v", c.TimeoutResolution, c.ResponseTimeout)
	case c.TimerResolution <= 0:
		return bad("TimerResolution", "%v must be positive", c.TimerResolution)
	case c.CollectionAge <= 0:
		return bad("CollectionAge", "%v must be positive", c.CollectionAge)
	case c.CollectionInterval <= 0:
		return bad("CollectionInterval", "%v must be positive", c.CollectionInterval)
	case c.MaxCallChain < 1:
		return bad("MaxCallChain", "%d must be at least 1", c.MaxCallChain)
	case c.StopDeactivationTimeout <= 0:
		return bad("StopDeactivationTimeout", "%v must be positive", c.StopDeactivationTimeout)
	case c.CloseTimeout <= 0:
		return bad("CloseTimeout", "%v must be positive", c.CloseTimeout)
	}
	if c.AdminAddr != "" {
		// Others dial it: it needs a host, as the membership requires.
		if host, _, err := net.SplitHostPort(c.AdminAddr); err != nil || host == "" {
			return bad("AdminAddr", "%q is not host:port with a host other silos can reach", c.AdminAddr)
		}
	}
	for typ, tc := range c.Types {
		if tc.CollectionAge < 0 {
			return bad(fmt.Sprintf("Types[%q].CollectionAge", typ), "%v must not be negative", tc.CollectionAge)
		}
		if tc.CollectionInterval < 0 {
			return bad(fmt.Sprintf("Types[%q].CollectionInterval", typ), "%v must not be negative", tc.CollectionInterval)
		}
	}
	if c.Cluster != nil {
		if err := c.Cluster.validate(); err != nil {
			return err
		}
	}
	if c.Gateway != nil {
		if err := c.Gateway.validate(); err != nil {
			return err
		}
	}
	if c.Cluster != nil && c.DataDir != "" {
		return bad("DataDir", "the embedded store is for a silo alone: an activation may move to any silo of a cluster, so the cluster's silos must share their storage (Storage[%q], such as a pgstore.Store)", grain.DefaultStorage)
	}
	if c.Reminders != nil {
		if err := c.Reminders.validate(); err != nil {
			return err
		}
	}
	for name, p := range c.Storage {
		if p == nil {
			return bad(fmt.Sprintf("Storage[%q]", name), "is nil")
		}
	}
	for i, f := range c.IncomingFilters {
		if f == nil {
			return bad(fmt.Sprintf("IncomingFilters[%d]", i), "is nil")
		}
	}
	for i, f := range c.OutgoingFilters {
		if f == nil {
			return bad(fmt.Sprintf("OutgoingFilters[%d]", i), "is nil")
		}
	}
	return nil
}
