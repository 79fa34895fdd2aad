package directory

import (
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/grain"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Config configures a Directory. Start from DefaultConfig and change what
// you need; New rejects a Config with a field out of range and names it.
type Config struct {
	// VirtualNodes is how many points each silo stands at on the ring.
	// A silo's share of the grains varies around 1/N by about
	// 1/sqrt(VirtualNodes): with the default 64, by roughly 12%, which
	// keeps the busiest of a few silos within a third of the mean, while
	// the ring of even 100 silos is 6,400 points (100 KB, 13 comparisons
	// a lookup) and rebuilding it on a membership change takes
	// microseconds. Default 64; 1 to 4,096.
	VirtualNodes int

	// CacheSize is how many lookups the caller-side cache holds; 0 turns
	// caching off. It bounds the cache's memory: an entry and its index
	// entry have a fixed size, plus the grain ID's strings
	// (BenchmarkCacheMemory; docs/benchmarks.md#the-directorys-lookup-cache).
	// Default 100,000.
	CacheSize int

	// CacheTTL is how long a cached lookup is trusted. Entries go stale
	// when activations end or move, and callers invalidate them when a
	// forward fails; the TTL bounds how long a stale entry that no call
	// trips over can linger. Default 5 min.
	CacheTTL time.Duration

	// MaxHops is how many times a request may be passed on to the silo
	// that the silo holding it believes owns its grain. Requests race
	// with membership changes: a sender with an older view reaches the
	// old owner, which passes the request on. Past the bound, views
	// disagree, and the request fails with Unavailable rather than be
	// recorded where its owner will not find it. Default 2; 0 to 16.
	MaxHops int

	// HandoffBatch is the most entries one handoff message carries, so
	// that the handoff of a large partition stays within transport message
	// limits: an entry is a grain ID, a silo's member ID and a number, so
	// a batch of ordinary names is far below them. Default 1,024.
	HandoffBatch int

	// Logger receives the directory's logs. Default: a no-op logger.
	Logger *zap.Logger

	// RecoveryWindow is how long after a membership change this silo
	// answers a miss on a grain that moved to it with "retry" instead of
	// "none", and refuses new registrations of such grains: the time for
	// every silo to hear of the change and register its activations again
	// here, and for the former owners' handoffs to arrive. Shorter lets
	// new grains of the moved ranges activate sooner after a failure;
	// longer covers slower gossip. Default 500 ms; 0 turns it off.
	RecoveryWindow time.Duration

	// Clock drives the cache's TTL and the recovery window. Tests pass a
	// fake clock and advance it. Default: the real clock.
	Clock clockwork.Clock

	// Local yields this silo's activations that hold their entries, for
	// OpResync: another silo that took this one for dead asks it to
	// register them all again. Called without locks held. May be nil.
	Local func() iter.Seq[Item]

	// RetryNeeded is told that registrations of this silo's activations
	// wait to be sent again: the silo calls RetryRegistrations soon
	// (well within RecoveryWindow, so they reach their owner before it
	// answers misses). Called without locks held, on any goroutine. May
	// be nil; then the silo must call RetryRegistrations periodically.
	RetryNeeded func()

	// Lost is told that one of this silo's own activations lost its
	// registration to another: found when a membership change makes this
	// silo register its activations again at their new owners, or when
	// an entry it handed off met another already there. The silo must
	// deactivate local and forward its queued requests to winner. It may
	// name an activation that has ended already, and may be told of one
	// activation more than once; the silo ignores what it does not hold.
	// Called without locks held, on any goroutine. May be nil.
	Lost func(id grain.ID, local Entry, winner Entry)
}

// DefaultConfig returns the configuration described on each field.
func DefaultConfig() Config {
	return Config{
		VirtualNodes:   64,
		CacheSize:      100_000,
		CacheTTL:       5 * time.Minute,
		MaxHops:        2,
		HandoffBatch:   1024,
		RecoveryWindow: 500 * time.Millisecond,
		Logger:         zap.NewNop(),
		Clock:          clockwork.NewRealClock(),
	}
}

// Bounds of the Config fields.
const (
	maxVirtualNodes = 4096
	maxHops         = 16
)

// ConfigError names the field of a Config that is out of range.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "directory: config: " + e.Field + ": " + e.Reason }

func (c *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.VirtualNodes < 1 || c.VirtualNodes > maxVirtualNodes:
		return bad("VirtualNodes", "%d must be 1 to %d", c.VirtualNodes, maxVirtualNodes)
	case c.CacheSize < 0 || c.CacheSize > MaxCacheSize:
		return bad("CacheSize", "%d must be 0 to %d", c.CacheSize, MaxCacheSize)
	case c.CacheTTL <= 0:
		return bad("CacheTTL", "%v must be positive", c.CacheTTL)
	case c.MaxHops < 0 || c.MaxHops > maxHops:
		return bad("MaxHops", "%d must be 0 to %d", c.MaxHops, maxHops)
	case c.RecoveryWindow < 0:
		return bad("RecoveryWindow", "%v must not be negative", c.RecoveryWindow)
	case c.HandoffBatch < 1:
		return bad("HandoffBatch", "%d must be at least 1", c.HandoffBatch)
	case c.Logger == nil:
		return bad("Logger", "is nil; use zap.NewNop() for no logging")
	case c.Clock == nil:
		return bad("Clock", "is nil; use clockwork.NewRealClock()")
	}
	return nil
}

// maxDead bounds how many dead silos a Directory remembers (see
// Directory.dead). Member IDs are unique per process, so a dead ID never
// comes back; remembering the latest thousands covers any message still
// in flight from one.
const maxDead = 4096

// Directory is one silo's part of the distributed grain directory: the
// partition of entries it owns, its view of the ring, and its lookup
// cache. It is pure: it starts no goroutine and does no I/O; requests to
// other silos go through the Sender.
//
// All methods may be called from any goroutine. mu guards the ring's
// updates, the partition and the dead set; callbacks (done, reply,
// Config.Lost) and Sender.Send are never called with it held.
type Directory struct {
	cfg    Config
	self   string
	sender Sender
	log    *zap.Logger
	cache  *Cache

	// ring is the current view; written with mu held, read without it by
	// the cache paths (a stale read only sends a request the long way).
	ring atomic.Pointer[Ring]

	mu   sync.Mutex
	part *Partition          // mu
	dead map[string]struct{} // mu; silos SiloDead named: entries naming them are refused
	// deadOrder holds the dead set's members oldest first, to forget the
	// oldest past maxDead. mu.
	deadOrder []string
	// retry holds this silo's own activations whose registration at a
	// new owner could not be delivered; RetryRegistrations sends them
	// again. mu.
	retry map[grain.ID]Entry
	// recovering holds the views before recent changes, each with the end
	// of its recovery window, oldest first; see recoveringLocked. mu.
	recovering []recovery

	lookups       atomic.Uint64
	cacheHits     atomic.Uint64
	remoteLookups atomic.Uint64
	forwarded     atomic.Uint64
	refused       atomic.Uint64
	handedOff     atomic.Uint64
	dropped       atomic.Uint64
	lost          atomic.Uint64
}

// New returns the directory of silo self, which talks to other silos
// through sender. Its ring is empty, so lookups and registrations fail
// with Unavailable until the first SetMembers.
func New(cfg Config, self string, sender Sender) (*Directory, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if self == "" {
		return nil, errors.New("directory: New: empty silo ID")
	}
	if sender == nil {
		return nil, errors.New("directory: New: nil Sender")
	}
	d := &Directory{
		cfg:    cfg,
		self:   self,
		sender: sender,
		log:    cfg.Logger.With(zap.String("silo", self)),
		cache:  NewCache(cfg.CacheSize, cfg.CacheTTL, cfg.Clock),
		part:   NewPartition(),
		dead:   make(map[string]struct{}),
	}
	d.ring.Store(NewRing(nil, cfg.VirtualNodes))
	return d, nil
}

// Self returns this silo's member ID. Any goroutine.
func (d *Directory) Self() string { return d.self }

// Ring returns the current view of the ring. Any goroutine.
func (d *Directory) Ring() *Ring { return d.ring.Load() }

// Owner returns the silo that owns id's entry in the current view, "" when
// the ring is empty. Any goroutine.
func (d *Directory) Owner(id grain.ID) string { return d.ring.Load().OwnerOf(id) }

// CachedLookup answers without a message: from the own partition when this
// silo owns id (authoritative: false means id has no activation), else
// from the cache (false means unknown). Any goroutine.
//
// Only an answer a caller routes by counts in Stats.Lookups: an entry
// naming another silo. A miss, or an entry naming this silo (whose catalog
// then lacks the activation, so the caller asks again), is left to the
// Lookup the caller makes next, which counts.
func (d *Directory) CachedLookup(id grain.ID) (Entry, bool) {
	if e, ok, owner, _ := d.lookupOwned(id); owner == d.self {
		if ok && e.Silo != d.self {
			d.lookups.Add(1)
		}
		return e, ok
	}
	e, ok := d.cache.Get(id)
	if ok && e.Silo != d.self {
		d.lookups.Add(1)
		d.cacheHits.Add(1)
	}
	return e, ok
}

// lookupOwned returns id's owner in the current view and, when that is
// this silo, looks id up in the own partition; recovering says a miss may
// be an entry still on its way here. Any goroutine; takes mu when owned.
func (d *Directory) lookupOwned(id grain.ID) (e Entry, ok bool, owner string, recovering bool) {
	if owner = d.ring.Load().OwnerOf(id); owner != d.self {
		return Entry{}, false, owner, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if owner = d.ring.Load().OwnerOf(id); owner != d.self {
		return Entry{}, false, owner, false // the view changed meanwhile
	}
	e, ok = d.part.Lookup(id)
	return e, ok, owner, !ok && d.recoveringLocked(id)
}

// recoveringLocked reports whether id's entry may still be on its way to
// this silo: id moved here with the last view change, less than
// Config.RecoveryWindow ago. Until then the silos that hold activations
// register them again here and former owners hand their entries over, so
// a miss is not yet an answer: a Lookup that said "none" would let the
// caller activate the grain a second time, and that newer activation
// would win over the one being re-registered. mu held.
func (d *Directory) recoveringLocked(id grain.ID) bool {
	if len(d.recovering) == 0 {
		return false
	}
	now := d.cfg.Clock.Now()
	for len(d.recovering) > 0 && !now.Before(d.recovering[0].until) {
		d.recovering = d.recovering[1:]
	}
	for _, r := range d.recovering {
		if r.prev == nil || r.prev.OwnerOf(id) != d.self {
			return true
		}
	}
	return false
}

// recovery is the view before a change and the end of the window in
// which entries that moved with the change may still be on their way. A
// nil prev covers every grain: a silo taken for dead came back, and its
// purged entries may be anywhere.
type recovery struct {
	prev  *Ring
	until time.Time
}

// errRecovering answers a Lookup or Register of a grain whose entry may
// still be on its way after a membership change; the caller retries.
func errRecovering(id grain.ID) error {
	return status.Errorf(codes.Unavailable, "directory: %v moved to this silo with a membership change and its entry may still be on its way; retry", id)
}

// Lookup finds where id lives and calls done with the entry, whether there
// is one, or an error (Unavailable when the owner cannot be reached or the
// ring is empty, cache or not). The own partition answers when this silo
// owns id, and done runs before Lookup returns; else the cache, else the
// owner, by a message. A found answer is cached. Any goroutine.
func (d *Directory) Lookup(id grain.ID, done func(e Entry, found bool, err error)) {
	if id.IsZero() {
		done(Entry{}, false, invalid("Lookup of the zero grain ID"))
		return
	}
	d.lookups.Add(1)
	e, ok, owner, recovering := d.lookupOwned(id)
	switch {
	case owner == "":
		done(Entry{}, false, ErrNoSilos)
	case owner != d.self:
		if e, ok := d.cache.Get(id); ok {
			d.cacheHits.Add(1)
			done(e, true, nil)
			return
		}
		d.remoteLookups.Add(1)
		d.askOwner(owner, id, done)
	case recovering:
		done(Entry{}, false, errRecovering(id))
	default:
		if ok {
			d.cache.Put(id, e)
		}
		done(e, ok, nil)
	}
}

// LookupOwner is Lookup past the cache, for operators, who want the
// owner's answer rather than a hint that may be stale: it asks the owner
// even when the cache holds an entry. It counts nothing in Stats, which
// are about routing. Any goroutine.
func (d *Directory) LookupOwner(id grain.ID, done func(e Entry, found bool, err error)) {
	if id.IsZero() {
		done(Entry{}, false, invalid("Lookup of the zero grain ID"))
		return
	}
	e, ok, owner, recovering := d.lookupOwned(id)
	switch {
	case owner == "":
		done(Entry{}, false, ErrNoSilos)
	case owner != d.self:
		d.askOwner(owner, id, done)
	case recovering:
		done(Entry{}, false, errRecovering(id))
	default:
		done(e, ok, nil)
	}
}

// askOwner sends a Lookup of id to owner. Any goroutine; mu not held.
func (d *Directory) askOwner(owner string, id grain.ID, done func(Entry, bool, error)) {
	d.sender.Send(owner, &Request{Op: OpLookup, Items: []Item{{ID: id}}}, func(resp *Response, err error) {
		if err == nil && resp == nil {
			err = errNoResponse
		}
		if err != nil {
			done(Entry{}, false, err)
			return
		}
		if resp.Found {
			d.cache.Put(id, resp.Entry)
		}
		done(resp.Entry, resp.Found, nil)
	})
}

// Register records that e holds id's activation, unless another entry was
// recorded first, at id's owner, and calls done with the entry that holds
// (e or the first) or an error. When the winner is not e, the caller must
// discard its activation and forward what it queued to the winner. The
// winner is cached. done runs before Register returns when this silo owns
// id. Any goroutine.
func (d *Directory) Register(id grain.ID, e Entry, done func(winner Entry, err error)) {
	switch {
	case id.IsZero():
		done(Entry{}, invalid("Register of the zero grain ID"))
		return
	case e.Silo == "":
		done(Entry{}, invalid("Register of %v with an entry that names no silo", id))
		return
	}
	d.mu.Lock()
	owner := d.ring.Load().OwnerOf(id)
	if owner == d.self {
		w, err := d.registerFreshLocked(id, e)
		d.mu.Unlock()
		if err == nil {
			d.cache.Put(id, w)
		}
		done(w, err)
		return
	}
	d.mu.Unlock()
	if owner == "" {
		done(Entry{}, ErrNoSilos)
		return
	}
	d.sender.Send(owner, &Request{Op: OpRegister, Items: []Item{{ID: id, Entry: e}}}, func(resp *Response, err error) {
		if err == nil && (resp == nil || resp.Entry.Silo == "") {
			err = errNoResponse
		}
		if err != nil {
			done(Entry{}, err)
			return
		}
		d.cache.Put(id, resp.Entry)
		done(resp.Entry, nil)
	})
}

// registerFreshLocked registers a new activation: as registerLocked, but
// while id's entry may still be on its way here (recoveringLocked) it is
// refused, to be retried, unless it is the entry itself. mu held.
func (d *Directory) registerFreshLocked(id grain.ID, e Entry) (Entry, error) {
	if w, ok := d.part.Lookup(id); !ok && d.recoveringLocked(id) {
		return Entry{}, errRecovering(id)
	} else if ok && w == e {
		return w, nil
	}
	return d.registerLocked(id, e)
}

// registerLocked registers e for id in the own partition, refusing an
// entry that names a dead silo. mu held.
func (d *Directory) registerLocked(id grain.ID, e Entry) (Entry, error) {
	if _, dead := d.dead[e.Silo]; dead {
		return Entry{}, status.Errorf(codes.FailedPrecondition, "directory: cannot register %v at %v: silo %s is dead", id, e, e.Silo)
	}
	return d.part.Register(id, e), nil
}

// Unregister forgets that e holds id's activation, at id's owner, if e is
// the recorded entry: a newer entry stays. Fire and forget: a failure is
// logged. It also drops e from the cache. Any goroutine.
func (d *Directory) Unregister(id grain.ID, e Entry) {
	if id.IsZero() || e.Silo == "" {
		return
	}
	d.cache.Invalidate(id, e)
	d.mu.Lock()
	if d.retry[id] == e {
		delete(d.retry, id)
	}
	owner := d.ring.Load().OwnerOf(id)
	if owner == d.self {
		d.part.Unregister(id, e)
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	if owner == "" {
		return
	}
	d.sender.Send(owner, &Request{Op: OpUnregister, Items: []Item{{ID: id, Entry: e}}}, func(_ *Response, err error) {
		if err != nil {
			d.log.Debug("directory: unregister failed", zap.Stringer("grain", id), zap.Stringer("entry", e), zap.String("owner", owner), zap.Error(err))
		}
	})
}

// Invalidate drops id's cached entry if it is e (a zero e drops whatever
// is cached): the caller found no activation there. Any goroutine.
func (d *Directory) Invalidate(id grain.ID, e Entry) { d.cache.Invalidate(id, e) }

// Stats is a snapshot of a Directory's state and counters.
type Stats struct {
	Entries      int     // in the own partition
	CacheEntries int     // in the lookup cache
	Silos        int     // on the ring
	Share        float64 // the fraction of the ring this silo owns
	DeadSilos    int     // remembered as dead
	Forwarded    uint64  // requests passed on to the silo believed to own them
	Refused      uint64  // requests refused at the hop bound
	HandedOff    uint64  // entries sent to new owners, moved or registered again
	Dropped      uint64  // handoff entries not placed: send failed, no owner, hop bound, dead silo (a live holder sends its own again)
	Lost         uint64  // own activations reported to Config.Lost
	Retrying     int     // own activations whose registration waits to be sent again

	// Lookups counts the lookups this silo made: each Lookup, and each
	// CachedLookup that found an entry. LookupCacheHits counts those the
	// lookup cache answered, RemoteLookups those sent to the owning silo;
	// the own partition answered the rest, or they failed at once (no
	// silos on the ring, or the grain's entry still on its way here).
	Lookups, LookupCacheHits, RemoteLookups uint64
}

// Stats returns a snapshot of the directory's state. Any goroutine.
func (d *Directory) Stats() Stats {
	ring := d.ring.Load()
	d.mu.Lock()
	entries, dead, retrying := d.part.Len(), len(d.dead), len(d.retry)
	d.mu.Unlock()
	return Stats{
		Entries:         entries,
		CacheEntries:    d.cache.Len(),
		Silos:           ring.Len(),
		Share:           ring.Share(d.self),
		DeadSilos:       dead,
		Forwarded:       d.forwarded.Load(),
		Refused:         d.refused.Load(),
		HandedOff:       d.handedOff.Load(),
		Retrying:        retrying,
		Dropped:         d.dropped.Load(),
		Lost:            d.lost.Load(),
		Lookups:         d.lookups.Load(),
		LookupCacheHits: d.cacheHits.Load(),
		RemoteLookups:   d.remoteLookups.Load(),
	}
}

// Entries returns a copy of the own partition, sorted by grain ID, for
// tests and diagnostics. It takes time in proportion to the partition.
// Any goroutine.
func (d *Directory) Entries() []Item {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.part.Items()
}

// InvalidateSilo drops every cached lookup that names silo: it is
// shutting down, so its activations are ending. Any goroutine.
func (d *Directory) InvalidateSilo(silo string) { d.cache.InvalidateSilo(silo) }
