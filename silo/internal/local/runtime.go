package local

import (
	"context"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/boltstore"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Runtime is a silo's local runtime: it activates a grain on its first
// call, runs its requests on the scheduler under Orleans' admission rules,
// and collects it when it goes idle. Its fields are set by New and Open,
// and by the silo before Start (the test hooks Collected and Placing) or
// while it starts (Cl and Gw); after that the runtime owns them. A
// *Runtime is a grain.Caller for code that is not a grain.
type Runtime struct {
	Cfg   Config
	Log   *zap.Logger
	Clock clockwork.Clock
	Epoch time.Time // the clock's time at New; deadlines are offsets from it
	// realClock: the clock is the real one, so since may read the
	// monotonic clock directly.
	realClock bool
	Pool      *activation.Pool

	wheel timeoutWheel
	// TimerWheel drives grain timers. Started and halted with wheel.
	TimerWheel TimerWheel

	// Cl is the silo's membership of a cluster, or nil for a silo alone.
	// Set by Start.
	Cl Cluster
	// Gw serves external clients, or is nil. Set by Start.
	Gw Gateway

	Types map[string]*GrainType // written before Start only
	// ByMethod finds a type from the address of one of its registered
	// method descriptors, which generated references pass: a pointer
	// hashes faster than a type name. Written before Start only.
	ByMethod map[*grain.MethodDesc]*GrainType

	// relays holds the method descriptors made for the calls this silo
	// passes on without decoding them: to grain types it does not host,
	// and to observers.
	relays     sync.Map // relayKey -> *grain.MethodDesc
	relayCount atomic.Int32

	// Providers are the storage providers by name, resolved by Start;
	// embedded is the store the silo opened itself (DataDir), which it
	// closes. reminderTable keeps reminders, and rem fires them; both nil
	// when reminders are off.
	Providers     map[string]storage.Provider
	embedded      *boltstore.Store
	ReminderTable storage.ReminderTable
	Rem           *reminderService
	// RingChanged, when set, is told the directory's ring at each change
	// of the cluster's active silos (the streams' partition sweepers).
	// Written before Start only.
	RingChanged func(ring *directory.Ring, self string)

	NextActID atomic.Uint64
	Live      atomic.Int64 // activations in the catalog

	// Overload counts what the silo refused, shed, collected and
	// abandoned to protect itself.
	Overload OverloadCounters
	// spent sums the latencies of the requests from outside the silo whose
	// turns ended, in nanoseconds, and ended counts them: Latencies.
	spent atomic.Int64
	ended atomic.Uint64
	// limitLog rate-limits the logs of refusals at the Limiter's limit.
	limitLog logEvery
	// OneWayFailures counts the one-way requests that failed after their
	// senders were told they were sent; oneWayLog rate-limits their logs.
	OneWayFailures atomic.Uint64
	oneWayLog      logEvery

	// filterChain is the chain of Config.IncomingFilters, or nil for none.
	filterChain grain.Invocation

	// Closed ends when the silo closes; sleeping turns watch it.
	Closed   context.Context
	closeNow context.CancelFunc

	Started   atomic.Bool
	ready     atomic.Bool // Start finished: outside calls are taken
	wheelOnce sync.Once
	Stopping  atomic.Bool // no new activations; outside calls refused
	// draining: DeactivateAll began, so the silo stops gracefully and
	// every activation is to deactivate for shutdown. Stopping alone
	// does not say so: Close marks the silo stopping too, before it
	// aborts the runtime, and runs no OnDeactivate.
	draining atomic.Bool
	// aborted: Abort began; no lifecycle hook (OnActivate, OnDeactivate)
	// starts after it. See Call.Run.
	aborted  atomic.Bool
	collStop chan struct{}
	collDone chan struct{}
	// collNext is when, since Epoch, the collector makes its next look,
	// stored once every look due before it is made: math.MaxInt64 when
	// it makes none (no type to collect, or stopped), 0 before it starts.
	collNext  atomic.Int64
	emptyc    chan struct{} // closed when live reaches 0 while stopping
	emptyOnce sync.Once

	// Collected, when set before Start, is told the clock's time when
	// the collector starts and after each look. Tests only.
	Collected func(now time.Time)
	// Placing, when set before Start, is called when a call is about to
	// make an activation, after the stopping check. Tests only.
	Placing func(id grain.ID)
}

// New makes the local runtime of a silo; Open starts it.
func New(cfg Config) *Runtime {
	s := &Runtime{
		Cfg:      cfg,
		Log:      cfg.Logger,
		Clock:    cfg.Clock,
		Types:    map[string]*GrainType{},
		ByMethod: map[*grain.MethodDesc]*GrainType{},
		emptyc:   make(chan struct{}),
	}
	s.Epoch, s.realClock = s.Clock.Now(), cfg.RealClock
	s.filterChain = ChainIncoming(cfg.IncomingFilters)
	s.Closed, s.closeNow = context.WithCancel(context.Background())
	return s
}

// GrainType is a registered grain type.
type GrainType struct {
	Desc     *grain.ServiceDesc
	Factory  grain.Factory
	Opts     grain.TypeOptions
	Age      time.Duration
	Interval time.Duration
	Workers  int // stateless worker bound
	// Limits are the type's queue limits, resolved at registration from
	// the silo's configuration and the type's options.
	Limits QueueLimits
	// overLimit rate-limits the type's logs of its queue limits.
	overLimit limitLogs

	// The catalog of this type's activations, keyed by grain key: a
	// string hashes in one pass, a grain.ID in one per field.
	Acts catalog
	Sets sync.Map // key -> *workerSet, for a stateless worker
	// Live counts the type's activations from their start to their
	// removal from the catalog.
	Live atomic.Int64
}

// BeginStop marks the silo stopping and stops the collector; it reports
// whether this call did so.
func (s *Runtime) BeginStop() bool {
	s.Stopping.Store(true)
	if s.Started.Load() {
		close(s.collStop)
		<-s.collDone
	}
	return s.Started.Load()
}

// Open brings the local runtime up: storage, the scheduler, the timeout
// and timer wheels and the collector. StartReminders starts the reminder
// service after it, and GoLive takes outside calls. On error Open leaves
// nothing running.
func (s *Runtime) Open() error {
	if err := s.openStorage(); err != nil {
		return err
	}
	pool, err := activation.New(s.Cfg.Scheduler)
	if err != nil {
		return s.closeStorage(&ConfigError{Field: "Scheduler", Reason: err.Error()})
	}
	s.Pool = pool
	s.wheel.init(s, s.Cfg.TimeoutResolution)
	go s.wheel.run()
	s.TimerWheel.init(s, s.Cfg.TimerResolution)
	go s.TimerWheel.run()
	s.collStop, s.collDone = make(chan struct{}), make(chan struct{})
	go s.collect()
	s.Started.Store(true)
	return nil
}

// GoLive takes outside calls and starts firing reminders.
func (s *Runtime) GoLive() {
	s.ready.Store(true)
	if s.Rem != nil {
		s.Rem.goLive()
	}
}

// StopReminders fires no new reminder ticks; those in flight end as
// calls do.
func (s *Runtime) StopReminders() {
	if s.Rem != nil {
		s.Rem.Svc.Stop()
	}
}

// DeactivateAll asks every activation to deactivate for shutdown and
// returns a channel closed when the catalog is empty. It marks the silo
// draining before it looks at the catalog, so an activation added to the
// catalog after the look is asked by StartActivation instead.
func (s *Runtime) DeactivateAll() <-chan struct{} {
	s.draining.Store(true)
	s.ForEachActivation(func(a *Activation) { a.RequestDeactivation(grain.DeactivateShutdown) })
	s.maybeEmpty()
	return s.emptyc
}

// BeginClose marks the runtime aborted ahead of Abort, for Close: from
// here on no lifecycle hook (OnActivate, OnDeactivate) starts, even in
// the moment before Abort, when the runtime cannot otherwise tell Close
// from a Stop that begins.
func (s *Runtime) BeginClose() { s.aborted.Store(true) }

// Abort fails every queued request with Unavailable, wakes sleeping
// turns and closes the pool, which waits for the running turns.
func (s *Runtime) Abort() {
	// First: a hook turn that starts from here on, queued already or by
	// an activation that ends meanwhile, skips grain code (Call.Run).
	s.aborted.Store(true)
	s.StopReminders()
	// Fail what is queued first: the pool's Close waits for running turns,
	// and a turn may be waiting for one of these calls. Before the
	// sleepers wake, too: a woken turn that ends while its activation
	// still lives would start the next queued request, which Close
	// promises fails.
	s.ForEachActivation(func(a *Activation) { a.close() })
	s.closeNow() // wakes sleeping turns, so the pool's Close need not wait for them
	if s.Pool != nil {
		s.Pool.Close()
	}
}

// Release is the end of the runtime, after its pool stopped or closed:
// it waits for the reminder service, closes storage and halts the wheels.
func (s *Runtime) Release() {
	defer s.haltWheel()
	s.closeNow()
	if s.Rem != nil {
		s.Rem.wg.Wait()
	}
	s.closeStorage(nil)
}

// haltWheel stops the timeout sweeper and the timer wheel once; they run
// until the pool is stopped, since draining calls still need their
// timeouts.
func (s *Runtime) haltWheel() {
	s.wheelOnce.Do(func() {
		if s.Started.Load() {
			s.wheel.halt()
			s.TimerWheel.halt()
		}
	})
}

// ForEachActivation calls fn for every activation in the catalog.
func (s *Runtime) ForEachActivation(fn func(a *Activation)) {
	for _, t := range s.Types {
		t.Acts.each(func(a *Activation) bool {
			fn(a)
			return true
		})
		t.Sets.Range(func(_, v any) bool {
			for _, a := range v.(*WorkerSet).Snapshot() {
				fn(a)
			}
			return true
		})
	}
}

// Since returns the time since the silo's epoch. With the real clock it
// reads only the monotonic clock: a call's one clock read, and on some
// virtual machines a full time.Now costs as much as a channel operation.
func (s *Runtime) Since() time.Duration {
	if s.realClock {
		return time.Since(s.Epoch) // clockwork's Since reads the wall clock too
	}
	return s.Clock.Since(s.Epoch)
}

// CallNow is the time a call starts at, for its deadline: the timeout
// wheel's coarse clock with the real clock, which costs no clock read, and
// the exact time with a fake one, which tests move in jumps far larger
// than a tick.
func (s *Runtime) CallNow() time.Duration {
	if s.realClock {
		return s.wheel.coarseNow()
	}
	return s.Since()
}

// CollectorCaughtUp reports whether the idle collector has made every
// look due by now, a time of the runtime's clock, and asked the grains it
// found idle to deactivate; true once it stopped or when it has no type
// to look at. Any goroutine.
func (s *Runtime) CollectorCaughtUp(now time.Time) bool {
	return time.Duration(s.collNext.Load()) > now.Sub(s.Epoch)
}

// IdleNow is the time a turn ends at, for idle collection: it restarts
// the activation's idle clock (lifecycle.Machine.TurnDone). With the real
// clock it is the timeout wheel's coarse clock plus one resolution, which
// costs no clock read on the hot path and is not earlier than the true
// time while the sweeper keeps up, so the collector may take an
// activation up to one resolution late but not early; with a fake clock,
// the exact time. Any goroutine.
func (s *Runtime) IdleNow() time.Duration {
	if s.realClock {
		return s.wheel.coarseNow() + s.wheel.res
	}
	return s.Since()
}

// removeActivation drops a dead activation from the catalog.
func (s *Runtime) removeActivation(a *Activation) {
	removed := false
	if a.set != nil {
		removed = a.set.remove(a)
	} else {
		removed = a.typ.Acts.compareAndDelete(a.ID.Key, a)
	}
	if !removed {
		return
	}
	a.typ.Live.Add(-1)
	if s.Cl != nil && a.Registered.Load() {
		s.Cl.Unregister(a)
	}
	s.unreserve()
}

func (s *Runtime) maybeEmpty() {
	if s.Stopping.Load() && s.Live.Load() == 0 {
		s.emptyOnce.Do(func() { close(s.emptyc) })
	}
}

// activationFor returns the activation a request for id goes to, making
// one if there is none and the grain belongs here. A request that makes
// an activation is queued in it before the activation is published (c.act
// is then set): otherwise a failing OnActivate could end the activation
// before the request reached it, and the request would make another
// instead of getting the error; queued reports this, and then c belongs
// to the activation and may be gone already. remote says the grain is to
// be found or placed elsewhere in the cluster; a nil activation without
// remote means this silo is stopping.
func (s *Runtime) activationFor(id grain.ID, t *GrainType, c *Call) (a *Activation, remote, queued bool, err error) {
	if !t.Opts.StatelessWorker {
		if a, ok := t.Acts.Load(id.Key); ok {
			return a, false, false, nil // its key was checked when it was made
		}
	}
	if err := t.Opts.KeyKind.CheckKey(id.Key); err != nil {
		return nil, false, false, status.Errorf(codes.InvalidArgument, "granary: calling %s: %v (type %s takes %s keys)", id, err, id.Type, t.Opts.KeyKind)
	}
	if t.Opts.StatelessWorker {
		a, queued := s.workerFor(id, t, c)
		if a != nil || s.Cl == nil {
			return a, false, queued, nil
		}
		return nil, true, false, nil
	}
	if s.Cl != nil && !c.PlacedHere {
		return nil, true, false, nil // ask the directory
	}
	// Count the activation before looking at stopping: Stop sets stopping
	// before it looks at the catalog, and waits for the count to reach
	// zero, so either it sees this activation or this sees it stopping.
	s.Live.Add(1)
	if s.Stopping.Load() {
		s.unreserve()
		c.PlacedHere = false // elsewhere, then
		return nil, s.Cl != nil, false, nil
	}
	if s.Placing != nil {
		s.Placing(id)
	}
	s.maybeInterleave(t, c) // the request is held before Route could classify it
	a = s.newActivation(id, t)
	a.holdFirst(c)
	if actual, loaded := t.Acts.loadOrStore(id.Key, a); loaded {
		s.unreserve()
		return actual, false, false, nil
	}
	c.act = a
	s.activated(a)
	return a, false, true, nil
}

// ActivationByID returns activation actID of grain id if it is in the
// catalog, else nil.
func (s *Runtime) ActivationByID(id grain.ID, actID uint64) *Activation {
	if t := s.Types[id.Type]; t != nil {
		if a, ok := t.Acts.Load(id.Key); ok && a.ActID == actID {
			return a
		}
	}
	return nil
}

// unreserve gives back a count taken for an activation not made.
func (s *Runtime) unreserve() {
	if s.Live.Add(-1) == 0 {
		s.maybeEmpty()
	}
}

// activated starts a new activation, which the caller counted in live. In
// a cluster it first registers in the directory; see cluster.register.
func (s *Runtime) activated(a *Activation) {
	a.typ.Live.Add(1)
	if s.Cl != nil && a.set == nil {
		s.Cl.Register(a)
		return
	}
	s.StartActivation(a)
}

// StartActivation tells a new activation that its registration won, or
// that it needs none (Registered): it queues the activate turn. If the
// silo began draining meanwhile (Stop's DeactivateAll), the activation
// is asked to deactivate as soon as it is up. Stopping alone is not
// enough: a silo that closes (Close, Abort) is stopping too, and runs no
// OnDeactivate. The activation is in the catalog already, and
// DeactivateAll marks the silo draining before it looks there: either
// this sees the mark or DeactivateAll sees the activation.
func (s *Runtime) StartActivation(a *Activation) {
	a.Mu.Lock()
	a.unlockDo(nil, a.life.Registered(), nil, directory.Entry{})
	if s.draining.Load() {
		a.RequestDeactivation(grain.DeactivateShutdown)
	}
}

// UnknownType is the error for a call to a type no silo hosts.
func UnknownType(id grain.ID) error {
	return status.Errorf(codes.NotFound, "granary: unknown grain type %q (calling %s): no silo registered it", id.Type, id)
}

// HostedTypes lists the registered grain types.
func (s *Runtime) HostedTypes() []string {
	ts := make([]string, 0, len(s.Types))
	for name := range s.Types {
		ts = append(ts, name)
	}
	slices.Sort(ts)
	return ts
}

// RegisteredActivations yields this silo's activations that hold their
// directory entry, and the entries of the clients whose home is its
// gateway, for the directory to register again where their owner
// changed.
func (s *Runtime) RegisteredActivations() iter.Seq[directory.Item] {
	self := s.Cl.Self()
	return func(yield func(directory.Item) bool) {
		for _, t := range s.Types {
			if t.Opts.StatelessWorker {
				continue
			}
			ok := true
			t.Acts.each(func(a *Activation) bool {
				if a.Registered.Load() {
					ok = yield(directory.Item{ID: a.ID, Entry: directory.Entry{Silo: self, Activation: a.ActID}})
				}
				return ok
			})
			if !ok {
				return
			}
		}
		if s.Gw != nil {
			for _, it := range s.Gw.HomeEntries() {
				if !yield(it) {
					return
				}
			}
		}
	}
}

// countStateOps puts a counting provider in front of each resolved
// provider, so that every state operation of the silo's grains is
// counted. openStorage only, once it has resolved them.
func (s *Runtime) countStateOps() {
	for name, p := range s.Providers {
		s.Providers[name] = &CountingProvider{Provider: p}
	}
}

// OverloadCounters count the silo's self-protection since it started.
type OverloadCounters struct {
	QueueWarnings     atomic.Uint64 // requests queued past a soft queue limit
	QueueRefusals     atomic.Uint64 // requests refused at a hard queue limit
	WaitRefusals      atomic.Uint64 // requests refused past a queue wait limit
	LimitRefusals     atomic.Uint64 // requests refused at the limit of new requests in progress
	Shed              atomic.Uint64 // requests refused by load shedding
	MemoryCollections atomic.Uint64 // activations collected for memory pressure
	AbandonedTurns    atomic.Uint64 // turns still running when a close gave up on them
	Shedding          atomic.Bool   // the silo refuses new requests now
}
