package local

import (
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo/overload"
	"github.com/granaryio/granary/silo/storage"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
)

// Config is what the local runtime takes from the silo's configuration,
// which validated it; the fields mean what the silo's fields of the same
// names mean.
type Config struct {
	Name                    string
	Scheduler               activation.Config
	ResponseTimeout         time.Duration
	TimeoutResolution       time.Duration
	TimerResolution         time.Duration
	CollectionInterval      time.Duration
	MaxCallChain            int
	StopDeactivationTimeout time.Duration
	IncomingFilters         []grain.IncomingFilter
	OutgoingFilters         []grain.OutgoingFilter
	Logger                  *zap.Logger
	Rejections              *security.Rejections
	Clock                   clockwork.Clock
	// RealClock: Clock is the real clock, so the runtime may read the
	// monotonic clock directly.
	RealClock bool
	Storage   map[string]storage.Provider
	DataDir   string
	// Reminders is nil when the reminder service is off.
	Reminders *RemindersConfig
	// Clustered: the silo is a member of a cluster.
	Clustered bool
	// Shed is set when load shedding is on. While Overload.Shedding is
	// up, the gateway and the silo-to-silo receiver refuse a new request
	// with the error it returns, which names this silo as self, the ID
	// the sender knows it by. It counts the refusal in Overload.Shed; a
	// refused one-way request (oneWay), which has no one to tell, it
	// logs, rate-limited, naming from, the sender.
	Shed func(self, from string, oneWay bool) error
	// MemoryCollection collects idle activations while the heap is over
	// its target (memcollect.go); HeapTarget 0 is off.
	MemoryCollection MemoryCollectionConfig
	// QueueLimits are the silo-wide queue limits, which a type's option
	// or configuration overrides (GrainType.Limits).
	QueueLimits QueueLimits
	// MeasureLatency: the runtime sums the latencies of requests from
	// outside the silo, from their arrival to the end of their turns
	// (Runtime.Latencies), for the latency limit.
	MeasureLatency bool
	// Limiter, when set, bounds the new requests from outside the silo
	// that run here at once (see limitAdmitted); the silo sets it with
	// MeasureLatency, whose latencies adapt it.
	Limiter *overload.Limiter
}

// QueueLimits bound the requests queued at one activation, or at one
// stateless worker ID's set; a zero field is no limit. See the silo's.
type QueueLimits struct {
	Soft, Hard int
	Wait       time.Duration
}

// RemindersConfig sets up the reminder service; see the silo's.
type RemindersConfig struct {
	Table           storage.ReminderTable
	MinPeriod       time.Duration
	RefreshInterval time.Duration
	RetryInterval   time.Duration
}

// DefaultMinReminderPeriod is the shortest reminder period when the
// configuration sets none.
const DefaultMinReminderPeriod = time.Minute

// ConfigError names the field of the silo's configuration that the
// runtime could not use.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "silo: config: " + e.Field + ": " + e.Reason }
