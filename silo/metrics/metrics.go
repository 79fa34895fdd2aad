package metrics

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/granaryio/granary/silo"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts a silo's grain calls and exports them, with the silo's
// own counters, to a Prometheus registry. Make one with New, put its
// IncomingFilter in the silo's Config, and Attach the silo once it is
// made. Its methods may be called from any goroutine.
type Metrics struct {
	cfg       Config
	realClock bool
	epoch     time.Time // the clock's time at New; calls are timed from it
	bounds    []int64   // cfg.LatencyBuckets in nanoseconds

	// methods holds a *methodStats per *grain.MethodDesc called.
	methods sync.Map
	errors  errorRing
}

// New validates cfg, fills in its defaults and registers the grain-call
// families with cfg.Registerer. It fails with a *ConfigError naming a bad
// field, or with the Registerer's error (families of the same names
// registered already, by another Metrics on the same registry).
func New(cfg Config) (*Metrics, error) {
	cfg, realClock := cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Metrics{
		cfg:       cfg,
		realClock: realClock,
		epoch:     cfg.Clock.Now(),
		bounds:    nanosBounds(cfg.LatencyBuckets),
	}
	m.cfg.LatencyBuckets = append([]float64(nil), cfg.LatencyBuckets...)
	m.errors.buf = make([]CallError, cfg.RecentErrors)
	if err := cfg.Registerer.Register(callCollector{m}); err != nil {
		return nil, fmt.Errorf("metrics: registering the grain-call metrics: %w", err)
	}
	return m, nil
}

// Attach registers a collector that reads s's counters (Stats, TypeStats
// and StateStats) at each scrape, so a scrape costs the silo nothing
// between scrapes. The families carry no label naming the silo: the
// Prometheus server adds the instance it scraped. Until s's Start has
// returned, a scrape reports only granary_silo_ready, 0. One silo per
// registry: attaching a second fails with the Registerer's error.
func (m *Metrics) Attach(s *silo.Silo) error {
	if s == nil {
		return errors.New("metrics: Attach: nil silo")
	}
	if err := m.cfg.Registerer.Register(&siloCollector{s: s, lagSeries: m.cfg.StreamLagSeries}); err != nil {
		return fmt.Errorf("metrics: registering the silo's metrics: %w", err)
	}
	return nil
}

// Config configures a Metrics. New fills in the defaults described on
// each field and rejects a Config with a field out of range, naming it.
type Config struct {
	// Registerer receives the collectors: the grain-call families at New,
	// a silo's families at Attach. Required; pass prometheus.NewRegistry()
	// (or prometheus.DefaultRegisterer to share the process's registry).
	Registerer prometheus.Registerer

	// LatencyBuckets are the upper bounds, in seconds, of the buckets of
	// granary_grain_call_duration_seconds: positive, finite and
	// ascending. Each series costs one counter per bucket, so a few dozen
	// at most. Default DefaultLatencyBuckets: 50 µs to 10 s in steps of
	// 1, 2.5 and 5, which covers a local call (microseconds), a call that
	// writes state or calls other silos (milliseconds), and a call that
	// times out (the default response timeout is 30 s).
	LatencyBuckets []float64

	// RecentErrors is how many failed calls RecentErrors keeps, the
	// oldest dropped first. Default 64; 1 to MaxRecentErrors.
	RecentErrors int

	// StreamLagSeries bounds the series of
	// granary_stream_subscription_lag: a silo reports the lag of this many
	// subscriptions at most, those with the most events waiting. Each
	// series is labelled with a stream's name and a subscription's ID,
	// which grow with the application's data, so they are not all
	// exported: a silo may carry millions, and alerts need the worst
	// ones. Default 20; 1 to MaxStreamLagSeries.
	StreamLagSeries int

	// Clock times the calls and stamps the recent errors. Tests pass a
	// fake clock. Default: the real clock, read through the monotonic
	// clock.
	Clock clockwork.Clock
}

// DefaultLatencyBuckets is the default of Config.LatencyBuckets, in
// seconds.
var DefaultLatencyBuckets = []float64{
	50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5, 10,
}

// Bounds of the Config fields.
const (
	// DefaultRecentErrors is the default of Config.RecentErrors.
	DefaultRecentErrors = 64
	// MaxRecentErrors bounds Config.RecentErrors.
	MaxRecentErrors = 1 << 16
	// MaxLatencyBuckets bounds len(Config.LatencyBuckets).
	MaxLatencyBuckets = 64
	// DefaultStreamLagSeries is the default of Config.StreamLagSeries.
	DefaultStreamLagSeries = 20
	// MaxStreamLagSeries bounds Config.StreamLagSeries.
	MaxStreamLagSeries = 1000
)

// ConfigError names the field of a Config that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "metrics: config: " + e.Field + ": " + e.Reason }

// withDefaults returns c with the defaults filled in, and whether the
// clock is the real one.
func (c Config) withDefaults() (Config, bool) {
	if c.LatencyBuckets == nil {
		c.LatencyBuckets = DefaultLatencyBuckets
	}
	if c.RecentErrors == 0 {
		c.RecentErrors = DefaultRecentErrors
	}
	if c.StreamLagSeries == 0 {
		c.StreamLagSeries = DefaultStreamLagSeries
	}
	realClock := c.Clock == nil
	if realClock {
		c.Clock = clockwork.NewRealClock()
	}
	return c, realClock
}

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Registerer == nil:
		return bad("Registerer", "is nil; pass prometheus.NewRegistry() or prometheus.DefaultRegisterer")
	case len(c.LatencyBuckets) == 0:
		return bad("LatencyBuckets", "is empty; leave it nil for the default")
	case len(c.LatencyBuckets) > MaxLatencyBuckets:
		return bad("LatencyBuckets", "has %d bounds; want at most %d", len(c.LatencyBuckets), MaxLatencyBuckets)
	case c.RecentErrors < 1 || c.RecentErrors > MaxRecentErrors:
		return bad("RecentErrors", "%d must be 1 to %d", c.RecentErrors, MaxRecentErrors)
	case c.StreamLagSeries < 1 || c.StreamLagSeries > MaxStreamLagSeries:
		return bad("StreamLagSeries", "%d must be 1 to %d", c.StreamLagSeries, MaxStreamLagSeries)
	}
	prev := 0.0
	for i, b := range c.LatencyBuckets {
		field := fmt.Sprintf("LatencyBuckets[%d]", i)
		switch {
		case math.IsNaN(b) || math.IsInf(b, 0) || b <= 0:
			return bad(field, "%v must be a positive number of seconds", b)
		case b*1e9 >= math.MaxInt64:
			return bad(field, "%v s is longer than a time.Duration holds", b)
		case b <= prev:
			return bad(field, "%v must be greater than the bound before it, %v", b, prev)
		case math.Round(b*1e9) == 0:
			return bad(field, "%v s is less than a nanosecond", b)
		case math.Round(b*1e9) <= math.Round(prev*1e9):
			return bad(field, "%v is within a nanosecond of the bound before it, %v", b, prev)
		}
		prev = b
	}
	return nil
}

// nanosBounds converts bounds in seconds to nanoseconds.
func nanosBounds(secs []float64) []int64 {
	ns := make([]int64, len(secs))
	for i, s := range secs {
		ns[i] = int64(math.Round(s * 1e9))
	}
	return ns
}
