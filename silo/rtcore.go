package silo

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

// A Silo hosts grain activations: it activates a grain on its first call,
// runs its requests on the scheduler under Orleans' admission rules, and
// collects it when it goes idle. A *Silo is a grain.Caller for code that
// is not a grain; grains call through their Context.
type Runtime struct {
	cfg   Config
	log   *zap.Logger
	clock clockwork.Clock
	epoch time.Time // the clock's time at New; deadlines are offsets from it
	// realClock: the clock is the real one, so since may read the
	// monotonic clock directly.
	realClock bool
	pool      *activation.Pool

	wheel timeoutWheel
	// timerWheel drives grain timers. Started and halted with wheel.
	timerWheel timerWheel

	// cl is the silo's membership of a cluster, or nil for a silo alone.
	// Set by Start.
	cl *cluster
	// gw serves external clients, or is nil. Set by Start.
	gw *gateway

	types map[string]*grainType // written before Start only
	// byMethod finds a type from the address of one of its registered
	// method descriptors, which generated references pass: a pointer
	// hashes faster than a type name. Written before Start only.
	byMethod map[*grain.MethodDesc]*grainType

	// relays holds the method descriptors made for the calls this silo
	// passes on without decoding them: to grain types it does not host,
	// and to observers.
	relays     sync.Map // relayKey -> *grain.MethodDesc
	relayCount atomic.Int32

	// providers are the storage providers by name, resolved by Start;
	// embedded is the store the silo opened itself (DataDir), which it
	// closes. reminderTable keeps reminders, and rem fires them; both nil
	// when reminders are off.
	providers     map[string]storage.Provider
	embedded      *boltstore.Store
	reminderTable storage.ReminderTable
	rem           *reminderService

	nextActID atomic.Uint64
	live      atomic.Int64 // activations in the catalog

	// filterChain is the chain of Config.IncomingFilters, or nil for none.
	filterChain grain.Invocation

	// closed ends when the silo closes; sleeping turns watch it.
	closed   context.Context
	closeNow context.CancelFunc

	started   atomic.Bool
	ready     atomic.Bool // Start finished: outside calls are taken
	wheelOnce sync.Once
	stopping  atomic.Bool // no new activations; outside calls refused
	lifeMu    sync.Mutex
	stopped   bool
	collStop  chan struct{}
	collDone  chan struct{}
	emptyc    chan struct{} // closed when live reaches 0 while stopping
	emptyOnce sync.Once

	// collected, when set before Start, is told the clock's time when
	// the collector starts and after each of its ticks. Tests only.
	collected func(now time.Time)
	// placing, when set before Start, is called when a call is about to
	// make an activation, after the stopping check. Tests only.
	placing func(id grain.ID)
}

// grainType is a registered grain type.
type grainType struct {
	desc     *grain.ServiceDesc
	factory  grain.Factory
	opts     grain.TypeOptions
	age      time.Duration
	interval time.Duration
	workers  int // stateless worker bound

	// The catalog of this type's activations, keyed by grain key: a
	// string key hashes several times faster than a grain.ID.
	acts catalog
	sets sync.Map // key -> *workerSet, for a stateless worker
	// live counts the type's activations from their start to their
	// removal from the catalog.
	live atomic.Int64
}

// beginStop marks the silo stopping and stops the collector; it reports
// whether this call did so.
func (s *Runtime) beginStop() bool {
	s.stopping.Store(true)
	if s.started.Load() {
		close(s.collStop)
		<-s.collDone
	}
	return s.started.Load()
}

// start brings the local runtime up: storage, the scheduler, the timeout
// and timer wheels, the collector, and the reminder service, which is not
// live yet (see goLive). On error the caller closes the runtime.
func (s *Runtime) start() error {
	if err := s.openStorage(); err != nil {
		return err
	}
	pool, err := activation.New(s.cfg.Scheduler)
	if err != nil {
		return s.closeStorage(&ConfigError{Field: "Scheduler", Reason: err.Error()})
	}
	s.pool = pool
	s.wheel.init(s, s.cfg.TimeoutResolution)
	go s.wheel.run()
	s.timerWheel.init(s, s.cfg.TimerResolution)
	go s.timerWheel.run()
	s.collStop, s.collDone = make(chan struct{}), make(chan struct{})
	go s.collect()
	s.started.Store(true)
	return nil
}

// goLive takes outside calls and starts firing reminders.
func (s *Runtime) goLive() {
	s.ready.Store(true)
	if s.rem != nil {
		s.rem.goLive()
	}
}

// stopReminders fires no new reminder ticks; those in flight end as
// calls do.
func (s *Runtime) stopReminders() {
	if s.rem != nil {
		s.rem.svc.Stop()
	}
}

// deactivateAll asks every activation to deactivate for shutdown and
// returns a channel closed when the catalog is empty.
func (s *Runtime) deactivateAll() <-chan struct{} {
	s.forEachActivation(func(a *activationRec) { a.requestDeactivation(grain.DeactivateShutdown) })
	s.maybeEmpty()
	return s.emptyc
}

// abort fails every queued request with Unavailable, wakes sleeping
// turns and closes the pool, which waits for the running turns.
func (s *Runtime) abort() {
	s.stopReminders()
	// Fail what is queued first: the pool's Close waits for running turns,
	// and a turn may be waiting for one of these calls. Before the
	// sleepers wake, too: a woken turn that ends while its activation
	// still lives would start the next queued request, which Close
	// promises fails.
	s.forEachActivation(func(a *activationRec) {
		for _, c := range a.end() {
			s.fail(nil, c, unavailable(s, "it closed"))
		}
	})
	s.closeNow() // wakes sleeping turns, so the pool's Close need not wait for them
	if s.pool != nil {
		s.pool.Close()
	}
}

// release is the end of the runtime, after its pool stopped or closed:
// it waits for the reminder service, closes storage and halts the wheels.
func (s *Runtime) release() {
	defer s.haltWheel()
	s.closeNow()
	if s.rem != nil {
		s.rem.wg.Wait()
	}
	s.closeStorage(nil)
}

// haltWheel stops the timeout sweeper and the timer wheel once; they run
// until the pool is stopped, since draining calls still need their
// timeouts.
func (s *Runtime) haltWheel() {
	s.wheelOnce.Do(func() {
		if s.started.Load() {
			s.wheel.halt()
			s.timerWheel.halt()
		}
	})
}

// forEachActivation calls fn for every activation in the catalog.
func (s *Runtime) forEachActivation(fn func(a *activationRec)) {
	for _, t := range s.types {
		t.acts.each(func(a *activationRec) bool {
			fn(a)
			return true
		})
		t.sets.Range(func(_, v any) bool {
			for _, a := range v.(*workerSet).snapshot() {
				fn(a)
			}
			return true
		})
	}
}

// since returns the time since the silo's epoch. With the real clock it
// reads only the monotonic clock: a call's one clock read, and on some
// virtual machines a full time.Now costs as much as a channel operation.
func (s *Runtime) since() time.Duration {
	if s.realClock {
		return time.Since(s.epoch) // clockwork's Since reads the wall clock too
	}
	return s.clock.Since(s.epoch)
}

// callNow is the time a call starts at, for its deadline: the timeout
// wheel's coarse clock with the real clock, which costs no clock read, and
// the exact time with a fake one, which tests move in jumps far larger
// than a tick.
func (s *Runtime) callNow() time.Duration {
	if s.realClock {
		return s.wheel.coarseNow()
	}
	return s.since()
}

// removeActivation drops a dead activation from the catalog.
func (s *Runtime) removeActivation(a *activationRec) {
	removed := false
	if a.set != nil {
		removed = a.set.remove(a)
	} else {
		removed = a.typ.acts.compareAndDelete(a.id.Key, a)
	}
	if !removed {
		return
	}
	a.typ.live.Add(-1)
	if s.cl != nil && a.registered.Load() {
		s.cl.dir.Unregister(a.id, directory.Entry{Silo: s.cl.self, Activation: a.actID})
	}
	s.unreserve()
}

func (s *Runtime) maybeEmpty() {
	if s.stopping.Load() && s.live.Load() == 0 {
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
func (s *Runtime) activationFor(id grain.ID, t *grainType, c *call) (a *activationRec, remote, queued bool, err error) {
	if !t.opts.StatelessWorker {
		if a, ok := t.acts.load(id.Key); ok {
			return a, false, false, nil // its key was checked when it was made
		}
	}
	if err := t.opts.KeyKind.CheckKey(id.Key); err != nil {
		return nil, false, false, status.Errorf(codes.InvalidArgument, "granary: calling %s: %v (type %s takes %s keys)", id, err, id.Type, t.opts.KeyKind)
	}
	if t.opts.StatelessWorker {
		a, queued := s.workerFor(id, t, c)
		if a != nil || s.cl == nil {
			return a, false, queued, nil
		}
		return nil, true, false, nil
	}
	if s.cl != nil && !c.placedHere {
		return nil, true, false, nil // ask the directory
	}
	// Count the activation before looking at stopping: Stop sets stopping
	// before it looks at the catalog, and waits for the count to reach
	// zero, so either it sees this activation or this sees it stopping.
	s.live.Add(1)
	if s.stopping.Load() {
		s.unreserve()
		c.placedHere = false // elsewhere, then
		return nil, s.cl != nil, false, nil
	}
	if s.placing != nil {
		s.placing(id)
	}
	a = s.newActivation(id, t)
	a.pushLocked(c) // a is not published yet: no lock needed
	if actual, loaded := t.acts.loadOrStore(id.Key, a); loaded {
		s.unreserve()
		return actual, false, false, nil
	}
	c.act = a
	s.activated(a)
	return a, false, true, nil
}

// activationByID returns activation actID of grain id if it is in the
// catalog, else nil.
func (s *Runtime) activationByID(id grain.ID, actID uint64) *activationRec {
	if t := s.types[id.Type]; t != nil {
		if a, ok := t.acts.load(id.Key); ok && a.actID == actID {
			return a
		}
	}
	return nil
}

// unreserve gives back a count taken for an activation not made.
func (s *Runtime) unreserve() {
	if s.live.Add(-1) == 0 {
		s.maybeEmpty()
	}
}

// activated starts a new activation, which the caller counted in live. In
// a cluster it first registers in the directory; see cluster.register.
func (s *Runtime) activated(a *activationRec) {
	a.typ.live.Add(1)
	if s.cl != nil && a.set == nil {
		s.cl.register(a)
		return
	}
	s.startActivation(a)
}

// startActivation queues a new activation's activate turn. If the silo
// began stopping meanwhile, the activation is asked to deactivate as soon
// as it is up.
func (s *Runtime) startActivation(a *activationRec) {
	if err := a.start(); err != nil {
		a.activated(nil, unavailable(s, "its silo is shutting down"))
		return
	}
	if s.stopping.Load() {
		a.requestDeactivation(grain.DeactivateShutdown)
	}
}

// unknownType is the error for a call to a type no silo hosts.
func unknownType(id grain.ID) error {
	return status.Errorf(codes.NotFound, "granary: unknown grain type %q (calling %s): no silo registered it", id.Type, id)
}

// hostedTypes lists the registered grain types.
func (s *Runtime) hostedTypes() []string {
	ts := make([]string, 0, len(s.types))
	for name := range s.types {
		ts = append(ts, name)
	}
	slices.Sort(ts)
	return ts
}

// registeredActivations yields this silo's activations that hold their
// directory entry, and the entries of the clients whose home is its
// gateway, for the directory to register again where their owner
// changed.
func (s *Runtime) registeredActivations() iter.Seq[directory.Item] {
	self := s.cl.self
	return func(yield func(directory.Item) bool) {
		for _, t := range s.types {
			if t.opts.StatelessWorker {
				continue
			}
			ok := true
			t.acts.each(func(a *activationRec) bool {
				if a.registered.Load() {
					ok = yield(directory.Item{ID: a.id, Entry: directory.Entry{Silo: self, Activation: a.actID}})
				}
				return ok
			})
			if !ok {
				return
			}
		}
		if s.gw != nil {
			for _, it := range s.gw.homeEntries() {
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
	for name, p := range s.providers {
		s.providers[name] = &countingProvider{Provider: p}
	}
}
