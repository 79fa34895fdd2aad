package silo

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/internal/streaming"
	"github.com/granaryio/granary/silo/storage"
)

// StreamsConfig turns on streams (package grain/streams): the providers
// grains and clients may name, and where subscriptions are kept. Every
// silo of a cluster must have the same.
type StreamsConfig struct {
	// Providers are the stream providers by name: a stream's first name
	// part.
	Providers map[string]StreamProviderConfig
	// Storage names the storage provider (Config.Storage) that keeps the
	// streams' explicit subscriptions. Default: the default provider when
	// there is one (Storage["default"], or the embedded store with
	// DataDir); a silo alone with neither keeps them in memory, for as long
	// as it runs. A cluster's silos need a shared one.
	Storage string
}

// StreamProviderConfig sets up one stream provider. Zero fields take the
// defaults given.
type StreamProviderConfig struct {
	// Kind is "memory" (the default) or "durable".
	//
	// A memory provider is cluster-wide and keeps a stream's events in
	// its activation only, until every subscriber has them: what a
	// subscriber's full buffer or the loss of the stream's silo drops is
	// gone, and nothing can be rewound to.
	//
	// A durable provider appends each event to a log before Publish
	// returns, and keeps a cursor per subscription, saved once its
	// subscriber handled the events: every event whose publish returned
	// reaches every subscriber at least once, whatever silo dies, and a
	// subscription may start from an earlier token or time (rewind). The
	// log is the embedded store for a silo alone, PostgreSQL for a
	// cluster.
	Kind string
	// Log keeps a durable provider's events and cursors. Default: the
	// default storage provider (Storage["default"], or the embedded store
	// with DataDir), which must keep stream logs, as boltstore and pgstore
	// do.
	Log storage.StreamLog
	// Partitions is how many log partitions a durable provider spreads its
	// streams over; the silos of a cluster share the work of their
	// partitions by the directory's ring. Fix it for the life of the log.
	// Default 16.
	Partitions int
	// MaxAge and MaxBytes are a durable provider's retention: every
	// TrimInterval (default 1 minute) its partitions drop the events
	// older than MaxAge, then the oldest beyond MaxBytes of payload. A
	// subscriber that falls further behind misses what was dropped.
	// Default 0: kept for ever.
	MaxAge       time.Duration
	MaxBytes     int64
	TrimInterval time.Duration
	// SweepInterval is how often the owner of a durable provider's
	// partition asks the streams with undelivered events in it to deliver
	// them, which activates a stream whose silo died. Default 1 second.
	SweepInterval time.Duration

	// Buffer bounds the events waiting for one subscriber, so that a slow
	// subscriber slows neither the publishers nor the others: past it, a
	// memory provider drops the subscriber's events (and counts them), and
	// a durable one has the subscriber read from the log until it caught
	// up. Default 1024.
	Buffer int
	// Batch bounds the events one delivery hands a subscriber, to run one
	// after another in one turn. Default 64.
	Batch int
	// Retries is how many times a failed delivery is tried again, after a
	// back-off from RetryMin doubling up to RetryMax, before the
	// subscription is parked. Defaults 5, 100ms and 5s.
	Retries            int
	RetryMin, RetryMax time.Duration
	// DeliverFor bounds one delivery call. Default 30s.
	DeliverFor time.Duration
}

// streamsMemoryStorage names the in-memory provider that keeps a silo
// alone's subscriptions when it has no storage.
const streamsMemoryStorage = "granary.streams.memory"

func (c *StreamsConfig) validate(cfg *Config) error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: "Streams." + field, Reason: fmt.Sprintf(format, args...)}
	}
	if len(c.Providers) == 0 {
		return bad("Providers", "is empty: name at least one stream provider")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Providers)) {
		if name == "" || strings.Contains(name, "/") {
			return bad(fmt.Sprintf("Providers[%q]", name), "a provider's name must be non-empty, without '/'")
		}
		if f, why := streaming.ProviderConfig(c.Providers[name]).Check(); f != "" {
			return bad(fmt.Sprintf("Providers[%q].%s", name, f), "%s", why)
		}
	}
	if c.Storage != "" && cfg.Storage[c.Storage] == nil {
		return bad("Storage", "names %q, which is not in Storage", c.Storage)
	}
	if c.Storage == "" && cfg.Cluster != nil && cfg.Storage[grain.DefaultStorage] == nil {
		return bad("Storage", "not set, and there is no default storage provider: a cluster's silos must share the store of the streams' subscriptions, as a stream's activation may move to any silo (set Storage[%q], such as a pgstore.Store)", grain.DefaultStorage)
	}
	return nil
}

// streamsStorage resolves the storage provider of the streams'
// subscriptions, adding the in-memory one to cfg.Storage for a silo alone
// that has no other. New, before the runtime is made.
func streamsStorage(cfg *Config) string {
	sc := cfg.Streams
	if sc == nil {
		return ""
	}
	if sc.Storage != "" {
		return sc.Storage
	}
	if cfg.Storage[grain.DefaultStorage] != nil || cfg.DataDir != "" {
		return grain.DefaultStorage
	}
	st := make(map[string]storage.Provider, len(cfg.Storage)+1)
	for k, v := range cfg.Storage {
		st[k] = v
	}
	st[streamsMemoryStorage] = storage.NewMemory(0)
	cfg.Storage = st
	return streamsMemoryStorage
}

// openStreams makes the stream runtime, whose subscriptions store is
// store, and registers the stream grain type. New, once the runtime
// exists.
func (s *Silo) openStreams(cfg *Config, store string) error {
	sc := cfg.Streams
	if sc == nil {
		return nil
	}
	provs := make(map[string]streaming.ProviderConfig, len(sc.Providers))
	for k, v := range sc.Providers {
		provs[k] = streaming.ProviderConfig(v)
	}
	idx := &handlerIndex{rt: s.rt}
	st, err := streaming.New(streaming.Config{
		Providers: provs,
		StorageProvider: func(name string) storage.Provider {
			p := s.rt.Providers[name]
			if c, ok := p.(*local.CountingProvider); ok {
				return c.Provider // the log is not state: uncounted
			}
			return p
		},
		Clustered: cfg.Cluster != nil,
		Caller:    s,
		Deliver:   &local.StreamDeliverMethod,
		Implicit:  idx.implicit,
		Handler:   idx.handler,
		Storage:   store,
		Clock:     cfg.Clock,
		Log:       s.log,
	})
	if err != nil {
		return &ConfigError{Field: "Streams", Reason: err.Error()}
	}
	s.streams = st
	if cfg.Cluster != nil {
		s.rt.RingChanged = st.RingChanged
	}
	return st.Register(s)
}

// handlerIndex answers the streams' questions about the registered types:
// which subscribe implicitly to a namespace, and which stream handlers a
// type has. Types are fixed once the silo starts, and the streams ask only
// after, so the index is built once, at the first question.
type handlerIndex struct {
	rt   *local.Runtime
	once sync.Once
	byNS map[string][]streaming.Implicit
}

func (x *handlerIndex) build() {
	x.byNS = map[string][]streaming.Implicit{}
	for _, typ := range slices.Sorted(maps.Keys(x.rt.Types)) {
		for _, im := range x.rt.Types[typ].Opts.ImplicitStreams {
			x.byNS[im.Namespace] = append(x.byNS[im.Namespace], streaming.Implicit{Type: typ, Handler: im.Handler})
		}
	}
}

func (x *handlerIndex) implicit(namespace string) []streaming.Implicit {
	x.once.Do(x.build)
	return x.byNS[namespace]
}

func (x *handlerIndex) handler(typ, name string) (grain.StreamHandlerDecl, bool) {
	t := x.rt.Types[typ]
	if t == nil {
		return nil, false
	}
	for _, h := range t.Opts.StreamHandlers {
		if h.HandlerName() == name {
			return h, true
		}
	}
	return nil, true
}
