// Package streaming runs a silo's side of streams (package grain/streams):
// the stream grain, granary.v1.Stream, one activation per stream, which
// numbers the stream's events, keeps its explicit subscriptions in grain
// state, and delivers each event to every subscriber, explicit and
// implicit, through the runtime's delivery method.
//
// Delivery runs beside the grain's turns: each subscriber with events
// waiting has one goroutine that sends them, a batch at a time and one
// batch in flight, so a subscriber's events arrive in order and a slow one
// holds up only its own bounded buffer. The goroutines end when their
// buffers are empty, and the activation's deactivation waits for them.
//
// It may import grain, grain/streams, internal/grainrt, the runtime
// (silo/internal/local, for the delivery method) and the wire types.
package streaming

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"

	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
	"github.com/granaryio/granary/silo/storage"
)

// The kinds of stream provider.
const (
	KindMemory  = "memory"
	KindDurable = "durable"
)

// Provider settings, with their defaults.
const (
	DefaultPartitions    = 16
	DefaultSweepInterval = time.Second
	DefaultTrimInterval  = time.Minute
	DefaultBuffer        = 1024
	DefaultBatch         = 64
	DefaultRetries       = 5
	DefaultRetryMin      = 100 * time.Millisecond
	DefaultRetryMax      = 5 * time.Second
	DefaultDeliverFor    = 30 * time.Second
)

// ProviderConfig is one stream provider's settings.
type ProviderConfig struct {
	// Kind is KindMemory ("" too) or KindDurable.
	Kind string
	// Log keeps a durable provider's events and cursors; nil: the
	// default storage provider's, when it keeps stream logs.
	Log storage.StreamLog
	// Partitions is how many log partitions a durable provider spreads
	// its streams over.
	Partitions int
	// MaxAge and MaxBytes bound what a durable provider's partitions
	// keep: events older than MaxAge, and the oldest beyond MaxBytes of
	// payload a partition, are trimmed every TrimInterval. 0: no bound.
	MaxAge       time.Duration
	MaxBytes     int64
	TrimInterval time.Duration
	// SweepInterval is how often the owner of a durable provider's
	// partition checks that the streams with events in it deliver them.
	SweepInterval time.Duration

	// Buffer bounds the events waiting for one subscriber; an event that
	// finds its subscriber's buffer full is dropped for that subscriber.
	Buffer int
	// Batch bounds the events of one delivery.
	Batch int
	// Retries is how many times a failed delivery is tried again before
	// its subscription is parked.
	Retries int
	// RetryMin and RetryMax bound the back-off between tries, which
	// doubles from RetryMin.
	RetryMin, RetryMax time.Duration
	// DeliverFor bounds one delivery call.
	DeliverFor time.Duration
}

// withDefaults fills in the zero settings.
func (c ProviderConfig) withDefaults() ProviderConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Buffer, DefaultBuffer)
	def(&c.Batch, DefaultBatch)
	def(&c.Retries, DefaultRetries)
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.DeliverFor == 0 {
		c.DeliverFor = DefaultDeliverFor
	}
	if c.Kind == "" {
		c.Kind = KindMemory
	}
	def(&c.Partitions, DefaultPartitions)
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.TrimInterval == 0 {
		c.TrimInterval = DefaultTrimInterval
	}
	return c
}

// Check says which setting is wrong, if any.
func (c ProviderConfig) Check() (field, reason string) {
	switch {
	case c.Buffer < 0:
		return "Buffer", "must not be negative"
	case c.Batch < 0:
		return "Batch", "must not be negative"
	case c.Retries < 0:
		return "Retries", "must not be negative"
	case c.RetryMin < 0 || c.RetryMax < 0:
		return "RetryMin", "back-offs must not be negative"
	case c.RetryMax != 0 && c.RetryMin > c.RetryMax:
		return "RetryMin", "must not exceed RetryMax"
	case c.DeliverFor < 0:
		return "DeliverFor", "must not be negative"
	case c.Kind != "" && c.Kind != KindMemory && c.Kind != KindDurable:
		return "Kind", fmt.Sprintf("%q is not a kind of stream provider (%q or %q)", c.Kind, KindMemory, KindDurable)
	case c.Kind != KindDurable && (c.Log != nil || c.Partitions != 0 || c.MaxAge != 0 || c.MaxBytes != 0 || c.TrimInterval != 0 || c.SweepInterval != 0):
		return "Kind", "Log, Partitions, MaxAge, MaxBytes, TrimInterval and SweepInterval are a durable provider's settings"
	case c.Partitions < 0 || c.Partitions > 1<<16:
		return "Partitions", "must be between 1 and 65536"
	case c.MaxAge < 0 || c.MaxBytes < 0 || c.TrimInterval < 0 || c.SweepInterval < 0:
		return "MaxAge", "retention and intervals must not be negative"
	}
	return "", ""
}

// Implicit is one grain type's implicit subscription.
type Implicit struct {
	Type    string
	Handler grain.StreamHandlerDecl
}

// Config is what the silo gives the streams.
type Config struct {
	Providers map[string]ProviderConfig
	// Caller sends the deliveries: the silo, as an outside caller.
	Caller grain.Caller
	// Deliver is the runtime's delivery method.
	Deliver *grain.MethodDesc
	// Implicit returns the implicit subscriptions to streams of a
	// namespace, from the types registered with the silo.
	Implicit func(namespace string) []Implicit
	// Handler returns the stream handler name of grain type typ, when the
	// type is registered with this silo (ok false: not registered here).
	Handler func(typ, name string) (h grain.StreamHandlerDecl, ok bool)
	// Storage names the storage provider of the subscriptions' state.
	Storage string
	// Providers looks up a storage provider by name once the silo's are
	// open (Start): a durable provider without a Log uses the default
	// one's.
	StorageProvider func(name string) storage.Provider
	// Clustered: partitions are swept by their owners on the ring
	// (RingChanged); a silo alone sweeps them all.
	Clustered bool
	Clock     clockwork.Clock
	Log       *zap.Logger
}

// Stats are the streams' counters on this silo.
type Stats struct {
	// Published counts the events published to streams active here.
	Published uint64
	// Delivered counts the events subscribers handled.
	Delivered uint64
	// Dropped counts events not delivered to a subscriber: its buffer was
	// full, it was parked, or its stream deactivated first.
	Dropped uint64
	// Retried counts deliveries tried again after a failure.
	Retried uint64
	// Parked counts the subscriptions parked, and Unparked those unparked.
	Parked, Unparked uint64
}

// Streams is a silo's stream runtime.
type Streams struct {
	cfg   Config
	provs map[string]ProviderConfig
	spec  *grain.StateSpec[*granaryv1.StreamSubscriptionsState]

	// ctx ends when the silo closes; deliveries are made under it.
	ctx    context.Context
	cancel context.CancelFunc
	// sweepCtx ends the sweepers, before ctx.
	sweepCtx    context.Context
	sweepCancel context.CancelFunc

	published, delivered, dropped, retried, parked, unparked atomic.Uint64
	tails                                                    atomic.Int64

	mu     sync.Mutex
	active map[*stream]struct{} // the stream activations on this silo

	// owns says whether this silo sweeps and trims a durable provider's
	// partition; nil owns none.
	owns atomic.Pointer[func(provider string, n uint32) bool]
	wg   sync.WaitGroup
}

// New checks cfg and makes the stream runtime.
func New(cfg Config) (*Streams, error) {
	if len(cfg.Providers) == 0 {
		return nil, errors.New("no stream providers")
	}
	s := &Streams{cfg: cfg, provs: make(map[string]ProviderConfig, len(cfg.Providers)), active: map[*stream]struct{}{}}
	for name, p := range cfg.Providers {
		if name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("stream provider %q: a name must be non-empty, without '/'", name)
		}
		if f, why := p.Check(); f != "" {
			return nil, fmt.Errorf("stream provider %q: %s %s", name, f, why)
		}
		s.provs[name] = p.withDefaults()
	}
	if cfg.Log == nil {
		s.cfg.Log = zap.NewNop()
	}
	if cfg.Clock == nil {
		s.cfg.Clock = clockwork.NewRealClock()
	}
	s.spec = grain.NewStateSpec[*granaryv1.StreamSubscriptionsState]("subscriptions", cfg.Storage)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.sweepCtx, s.sweepCancel = context.WithCancel(s.ctx)
	return s, nil
}

// Register registers the stream grain type with r, the silo.
func (s *Streams) Register(r grain.Registrar) error {
	return granaryv1.RegisterStreamGrain(r, func(id grain.ID) granaryv1.StreamGrain {
		return &stream{s: s}
	}, grain.WithState(s.spec))
}

// Start finds the durable providers' logs among the silo's open storage
// providers and starts sweeping and trimming their partitions. Start,
// once the silo takes calls.
func (s *Streams) Start() error {
	for _, name := range slices.Sorted(maps.Keys(s.provs)) {
		p := s.provs[name]
		if p.Kind != KindDurable {
			continue
		}
		if p.Log == nil {
			def := s.cfg.StorageProvider(grain.DefaultStorage)
			log, ok := def.(storage.StreamLog)
			switch {
			case def == nil:
				return fmt.Errorf("stream provider %q: Log not set, and there is no default storage provider to keep the log (set Storage[%q] to the embedded store or PostgreSQL, DataDir, or Log)", name, grain.DefaultStorage)
			case !ok:
				return fmt.Errorf("stream provider %q: Log not set, and the default storage provider (%T) keeps no stream logs (set Storage[%q] to the embedded store or PostgreSQL, DataDir, or Log)", name, def, grain.DefaultStorage)
			}
			p.Log = log
			s.provs[name] = p
		}
	}
	if !s.cfg.Clustered {
		all := func(string, uint32) bool { return true }
		s.owns.Store(&all)
	}
	for _, name := range slices.Sorted(maps.Keys(s.provs)) {
		if p := s.provs[name]; p.Kind == KindDurable {
			s.wg.Add(1)
			go s.sweep(name, p)
		}
	}
	return nil
}

// RingChanged makes this silo sweep and trim the partitions whose owner
// IDs it owns on ring.
func (s *Streams) RingChanged(ring *directory.Ring, self string) {
	owns := func(provider string, n uint32) bool { return ring.OwnerOf(partitionOwnerID(provider, n)) == self }
	s.owns.Store(&owns)
}

// sweep sweeps the partitions of durable provider name that this silo
// owns every SweepInterval, and trims them every TrimInterval, until the
// silo closes.
func (s *Streams) sweep(name string, p ProviderConfig) {
	defer s.wg.Done()
	tick := s.cfg.Clock.NewTicker(p.SweepInterval)
	defer tick.Stop()
	lastTrim := s.cfg.Clock.Now()
	for {
		select {
		case <-s.sweepCtx.Done():
			return
		case <-tick.Chan():
		}
		owns := s.owns.Load()
		if owns == nil {
			continue
		}
		trim := (p.MaxAge > 0 || p.MaxBytes > 0) && s.cfg.Clock.Since(lastTrim) >= p.TrimInterval
		if trim {
			lastTrim = s.cfg.Clock.Now()
		}
		for n := range uint32(p.Partitions) {
			if !(*owns)(name, n) {
				continue
			}
			part := storage.StreamPartition{Provider: name, N: n}
			ctx, cancel := context.WithTimeout(s.sweepCtx, p.DeliverFor)
			if err := s.sweepPartition(ctx, name, p, part); err != nil && s.sweepCtx.Err() == nil {
				s.cfg.Log.Warn("stream: sweeping a partition failed", zap.Stringer("partition", part), zap.Error(err))
			}
			if trim {
				var before time.Time
				if p.MaxAge > 0 {
					before = s.cfg.Clock.Now().Add(-p.MaxAge)
				}
				if _, err := p.Log.Trim(ctx, part, before, p.MaxBytes); err != nil && s.sweepCtx.Err() == nil {
					s.cfg.Log.Warn("stream: trimming a partition failed", zap.Stringer("partition", part), zap.Error(err))
				}
			}
			cancel()
		}
	}
}

// StopSweeping stops the partitions' sweepers and waits for them: a
// stopping silo's stream activations are about to leave. Idempotent.
func (s *Streams) StopSweeping() {
	s.sweepCancel()
	s.wg.Wait()
}

// Close ends the deliveries in flight and the sweepers; a silo closes its
// streams after its activations are gone. Idempotent.
func (s *Streams) Close() {
	s.StopSweeping()
	s.cancel()
}

// Stats returns the counters.
func (s *Streams) Stats() Stats {
	return Stats{
		Published: s.published.Load(), Delivered: s.delivered.Load(), Dropped: s.dropped.Load(),
		Retried: s.retried.Load(), Parked: s.parked.Load(), Unparked: s.unparked.Load(),
	}
}

// parseStreamKey reads a stream grain's key and finds its provider.
func (s *Streams) parseStreamKey(key string) (streams.ID, ProviderConfig, error) {
	id, err := streams.ParseID(key)
	if err != nil {
		return id, ProviderConfig{}, err
	}
	p, ok := s.provs[id.Provider]
	if !ok {
		return id, p, fmt.Errorf("stream %s: no stream provider %q is configured", id, id.Provider)
	}
	return id, p, nil
}

// SubscriptionStatus is what an operator sees of one subscription.
type SubscriptionStatus struct {
	ID      string
	Grain   string
	Handler string
	// Implicit: from the subscriber type's registration.
	Implicit bool
	// Parked, since ParkedAt, because of ParkedReason.
	Parked       bool
	ParkedReason string
	ParkedAt     time.Time
	// Handled is the token of the last event the subscriber handled.
	Handled streams.Token
	// Lag is how many events wait for the subscriber in its buffer.
	Lag int
}

// StreamStatus is what an operator sees of one stream active on this silo.
type StreamStatus struct {
	ID streams.ID
	// Type is the events' message type, once known.
	Type string
	// Last is the token of the last event published to this activation.
	Last          streams.Token
	Subscriptions []SubscriptionStatus
}

// Active lists the streams active on this silo, by name.
func (s *Streams) Active() []StreamStatus {
	s.mu.Lock()
	acts := make([]*stream, 0, len(s.active))
	for t := range s.active {
		acts = append(acts, t)
	}
	s.mu.Unlock()
	out := make([]StreamStatus, 0, len(acts))
	for _, t := range acts {
		out = append(out, t.status())
	}
	slices.SortFunc(out, func(a, b StreamStatus) int { return strings.Compare(a.ID.String(), b.ID.String()) })
	return out
}

func (s *Streams) track(t *stream, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.active[t] = struct{}{}
	} else {
		delete(s.active, t)
	}
}
