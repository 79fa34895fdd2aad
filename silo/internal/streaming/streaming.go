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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/grain/streams"
	granaryv1 "github.com/granaryio/granary/proto/granary/v1"
)

// Provider settings, with their defaults.
const (
	DefaultBuffer     = 1024
	DefaultBatch      = 64
	DefaultRetries    = 5
	DefaultRetryMin   = 100 * time.Millisecond
	DefaultRetryMax   = 5 * time.Second
	DefaultDeliverFor = 30 * time.Second
)

// ProviderConfig is one stream provider's settings. The memory provider is
// the one kind there is.
type ProviderConfig struct {
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
	Clock   clockwork.Clock
	Log     *zap.Logger
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

	published, delivered, dropped, retried, parked, unparked atomic.Uint64

	mu     sync.Mutex
	active map[*stream]struct{} // the stream activations on this silo
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
	return s, nil
}

// Register registers the stream grain type with r, the silo.
func (s *Streams) Register(r grain.Registrar) error {
	return granaryv1.RegisterStreamGrain(r, func(id grain.ID) granaryv1.StreamGrain {
		return &stream{s: s}
	}, grain.WithState(s.spec))
}

// Close ends the deliveries in flight; a silo closes its streams after
// its activations are gone.
func (s *Streams) Close() { s.cancel() }

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
