package silo

import (
	"fmt"
	"net"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/overload"
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

	// Types overrides collection and queue limits per grain type, keyed
	// by type name.
	Types map[string]TypeConfig

	// QueueLimits bounds how many requests wait at one activation (at one
	// stateless worker set): see QueueLimits. A type's own option
	// (grain.WithQueueLimits) or Types override it.
	QueueLimits QueueLimits

	// LoadShedding refuses new requests while the silo is saturated: see
	// LoadSheddingConfig. Off by default.
	LoadShedding LoadSheddingConfig

	// MemoryCollection collects idle activations while the Go heap is over
	// a target: see MemoryCollectionConfig. Off by default.
	MemoryCollection MemoryCollectionConfig

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
	// Streams, when set, turns on streams: see StreamsConfig. Nil (the
	// default): no stream provider, and no stream grain type.
	Streams *StreamsConfig
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

// TypeConfig overrides the silo's settings for one grain type. Zero
// fields keep the type's own option or the silo default.
type TypeConfig struct {
	CollectionAge      time.Duration
	CollectionInterval time.Duration
	QueueLimits        QueueLimits
}

// QueueLimits bounds the requests queued at one activation, counted from
// when a request reaches the activation until its turn starts; a stateless
// worker ID's requests count against its whole worker set. Zero means no
// limit.
type QueueLimits struct {
	// Soft: past it, the silo logs a warning naming the activation, at
	// most once a minute per type.
	Soft int
	// Hard: a request that would queue past it is refused with
	// ResourceExhausted, which gives the queue's depth; it never runs.
	Hard int
	// Wait bounds the time a new request from outside the silo (a
	// client's, through the gateway, or another silo's) waits here for
	// its turn, from when the silo receives it, the making of its
	// activation included. A request that waited longer is refused when
	// its turn comes, with ResourceExhausted, and never runs: its caller
	// learns well inside its deadline that the grain is too busy, rather
	// than at the deadline with a DeadlineExceeded that hides the queue.
	// Work the silo admitted already is not bounded, as load shedding
	// does not refuse it: calls between its own grains, reminder ticks,
	// calls another silo passed on and calls whose chain comes back
	// through this silo. A stalled turn delays the check until it ends,
	// so the callers' deadlines still bound a stall. A one-way request
	// refused for its wait is counted and logged, at most once a minute
	// per type. The coarse call clock times the wait, so the limit must
	// be at least TimeoutResolution. Set it above the waits a failover
	// causes (activations made again, their state read), or the
	// failover's calls are refused rather than served late.
	Wait time.Duration
}

// LoadSheddingConfig makes the gateway and the silo-to-silo receiver
// refuse new requests while the process's CPU use or its Go heap,
// averaged over Window, is over its limit, and, with LatencyLimit, limits
// how many new requests the silo runs at once to keep their latency
// under it (see LatencyLimit). Requests already admitted, responses,
// cancellations, directory and other system traffic are never refused. A
// refusal is ResourceExhausted with a RetryInfo of RetryAfter; Granary's
// Go client backs off that long from that gateway and tries another.
// Shedding starts above a limit and stops only below Hysteresis times it,
// so the silo does not flap.
type LoadSheddingConfig struct {
	// Enabled turns load shedding on. Default false: a silo alone on a
	// developer's machine, or one sharing cores with other processes,
	// would otherwise refuse work for load it did not cause.
	Enabled bool
	// CPULimit is the process's CPU use, as a fraction of the cores Go
	// may use (GOMAXPROCS), above which the silo sheds. Default 0.95, as
	// in Orleans; 0 does not shed for CPU. Under a CPU quota that is not
	// a whole number of cores, GOMAXPROCS rounds it up, so set the limit
	// to the quota's share of GOMAXPROCS or below.
	CPULimit float64
	// HeapLimit is the live Go heap (as of the last GC), in bytes, above
	// which the silo sheds. A shedding silo allocates little, so while its
	// heap keeps it shedding and no GC completes for a Window, it runs one.
	// Default 0: not for memory.
	HeapLimit uint64
	// LatencyLimit is the mean latency, from arrival to the end of their
	// turns, that the silo keeps the new requests from outside it (those
	// QueueLimits.Wait bounds) under, by limiting how many run at once.
	// It catches what CPU and heap do not: a silo whose grains wait on
	// something slower than themselves, such as a saturated database,
	// takes ever longer while its cores idle. The silo does not refuse
	// every new request for it, as it does for CPU and heap: each
	// fraction of a Window it measures the latency of the requests that
	// ended, and when it is over the limit, it lowers the number it runs
	// at once in proportion (to no fewer than MinConcurrency), then
	// raises it again while the latency stays under the limit; requests
	// past that number are refused with ResourceExhausted and a
	// RetryInfo of LatencyLimit. It counts what the grains' own work
	// takes, so set it above the workload's ordinary mean; one hot grain
	// raises it in proportion to its share of the requests. Default 0:
	// no limit.
	LatencyLimit time.Duration
	// MinConcurrency is the fewest new requests from outside the silo
	// that LatencyLimit lets it run at once, so that latency the load did
	// not cause (a failover making activations again, a slow dependency)
	// slows the silo's intake without stopping it. Default 16.
	MinConcurrency int
	// Window is the span the averages cover. Default 5 s.
	Window time.Duration
	// Hysteresis: once shedding, the silo stops only when every measure
	// is under Hysteresis times its limit. Default 0.9.
	Hysteresis float64
	// RetryAfter is the delay a refusal asks the caller to wait. Default
	// 1 s.
	RetryAfter time.Duration
}

// MemoryCollectionConfig collects idle activations, least recently used
// first, while the live Go heap (as of the last GC) is over HeapTarget: each is deactivated as idle
// collection would (OnDeactivate runs, state is written). An activation
// with a request queued or running is never collected. Idle collection by
// age goes on beside it.
type MemoryCollectionConfig struct {
	// HeapTarget is the live Go heap, in bytes, above which the silo
	// collects.
	// Default 0: off.
	HeapTarget uint64
	// Interval is how often the heap is checked. Default 1 s.
	Interval time.Duration
	// MaxPerRound bounds how many activations one check collects, so a
	// burst of deactivations does not itself overload the silo. Default
	// 1000.
	MaxPerRound int
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
		QueueLimits:             QueueLimits{Soft: DefaultQueueSoftLimit, Hard: DefaultQueueHardLimit},
		LoadShedding: LoadSheddingConfig{
			CPULimit:       0.95,
			MinConcurrency: overload.DefaultMinLimit,
			Window:         5 * time.Second,
			Hysteresis:     0.9,
			RetryAfter:     time.Second,
		},
		MemoryCollection: MemoryCollectionConfig{Interval: time.Second, MaxPerRound: 1000},
	}
}

// The default queue limits: far above what a well-behaved grain queues,
// and above what the benchmark suite's hottest grain does (its one-way
// senders queue a few thousand messages per grain on one core), so they
// stop a runaway queue without refusing ordinary bursts. A full queue at
// the hard limit holds tens of megabytes of requests.
const (
	DefaultQueueSoftLimit = 10000
	DefaultQueueHardLimit = 50000
)

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
	if err := c.QueueLimits.validate("QueueLimits", c.TimeoutResolution); err != nil {
		return err
	}
	if err := c.LoadShedding.validate(); err != nil {
		return err
	}
	if err := c.MemoryCollection.validate(); err != nil {
		return err
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
		if err := tc.QueueLimits.validate(fmt.Sprintf("Types[%q].QueueLimits", typ), c.TimeoutResolution); err != nil {
			return err
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
	if c.Streams != nil {
		if err := c.Streams.validate(c); err != nil {
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

func (q QueueLimits) validate(field string, resolution time.Duration) error {
	switch {
	case q.Soft < 0:
		return &ConfigError{Field: field + ".Soft", Reason: fmt.Sprintf("%d must not be negative", q.Soft)}
	case q.Hard < 0:
		return &ConfigError{Field: field + ".Hard", Reason: fmt.Sprintf("%d must not be negative", q.Hard)}
	case q.Soft > 0 && q.Hard > 0 && q.Soft > q.Hard:
		return &ConfigError{Field: field + ".Soft", Reason: fmt.Sprintf("%d must not exceed Hard %d", q.Soft, q.Hard)}
	case q.Wait < 0:
		return &ConfigError{Field: field + ".Wait", Reason: fmt.Sprintf("%v must not be negative", q.Wait)}
	case q.Wait > 0 && q.Wait < resolution:
		return &ConfigError{Field: field + ".Wait", Reason: fmt.Sprintf("%v is under TimeoutResolution %v, the clock that times it", q.Wait, resolution)}
	}
	return nil
}

func (l *LoadSheddingConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: "LoadShedding." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if !l.Enabled {
		return nil
	}
	switch {
	case !(l.CPULimit >= 0 && l.CPULimit <= 1): // NaN too
		return bad("CPULimit", "%v must be between 0 and 1 (a fraction of GOMAXPROCS cores)", l.CPULimit)
	case l.LatencyLimit < 0:
		return bad("LatencyLimit", "%v must not be negative", l.LatencyLimit)
	case l.LatencyLimit > 0 && l.MinConcurrency < 1:
		return bad("MinConcurrency", "%d must be at least 1 when LatencyLimit is set", l.MinConcurrency)
	case l.CPULimit == 0 && l.HeapLimit == 0 && l.LatencyLimit == 0:
		return bad("CPULimit", "load shedding is enabled but none of CPULimit, HeapLimit and LatencyLimit is set")
	case l.Window <= 0:
		return bad("Window", "%v must be positive", l.Window)
	case !(l.Hysteresis > 0 && l.Hysteresis <= 1): // NaN too
		return bad("Hysteresis", "%v must be in (0, 1]", l.Hysteresis)
	case l.RetryAfter <= 0:
		return bad("RetryAfter", "%v must be positive", l.RetryAfter)
	}
	return nil
}

func (m *MemoryCollectionConfig) validate() error {
	if m.HeapTarget == 0 {
		return nil
	}
	switch {
	case m.Interval <= 0:
		return &ConfigError{Field: "MemoryCollection.Interval", Reason: fmt.Sprintf("%v must be positive", m.Interval)}
	case m.MaxPerRound < 1:
		return &ConfigError{Field: "MemoryCollection.MaxPerRound", Reason: fmt.Sprintf("%d must be at least 1", m.MaxPerRound)}
	}
	return nil
}
