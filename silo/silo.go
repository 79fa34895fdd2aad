package silo

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/granaryio/granary/activation"
	"github.com/granaryio/granary/directory"
	"github.com/granaryio/granary/grain"
	"github.com/granaryio/granary/internal/transport"
	"github.com/granaryio/granary/security"
	"github.com/granaryio/granary/silo/storage"
	"github.com/granaryio/granary/silo/storage/boltstore"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrStarted is returned by RegisterGrain after Start.
var ErrStarted = errors.New("silo: grain types must be registered before Start")

// A Silo hosts grain activations: it activates a grain on its first call,
// runs its requests on the scheduler under Orleans' admission rules, and
// collects it when it goes idle. A *Silo is a grain.Caller for code that
// is not a grain; grains call through their Context.
type Silo struct {
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

	// startedAt is when Start began; up is set when Start has returned.
	startedAt atomic.Pointer[time.Time]
	up        atomic.Bool
	// hotMu serialises HotGrains, which owns activationRec.sampled.
	hotMu sync.Mutex
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

// New validates cfg and makes a silo. Register grain types, then Start it.
func New(cfg Config) (*Silo, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	realClock := cfg.Clock == nil
	if realClock {
		cfg.Clock = clockwork.NewRealClock()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Scheduler.Logger == nil {
		cfg.Scheduler.Logger = cfg.Logger
	}
	if cfg.Rejections == nil {
		cfg.Rejections = security.NewRejections(cfg.Logger.With(zap.String("silo", cfg.Name)))
	}
	s := &Silo{
		cfg:      cfg,
		log:      cfg.Logger.With(zap.String("silo", cfg.Name)),
		clock:    cfg.Clock,
		types:    map[string]*grainType{},
		byMethod: map[*grain.MethodDesc]*grainType{},
		emptyc:   make(chan struct{}),
	}
	s.epoch, s.realClock = s.clock.Now(), realClock
	s.filterChain = chainIncoming(cfg.IncomingFilters)
	s.closed, s.closeNow = context.WithCancel(context.Background())
	return s, nil
}

// Rejections returns what counts and logs the refusals of the silo's
// listeners: Config.Rejections, or the silo's own.
func (s *Silo) Rejections() *security.Rejections { return s.cfg.Rejections }

// RegisterGrain registers a grain type; generated RegisterXGrain functions
// call it. It fails after Start, for a type registered twice, and for
// options that contradict each other.
func (s *Silo) RegisterGrain(desc *grain.ServiceDesc, factory grain.Factory, opts ...grain.RegisterOption) error {
	if s.started.Load() {
		return ErrStarted
	}
	switch {
	case desc == nil || desc.Type == "":
		return errors.New("silo: RegisterGrain: descriptor without a type")
	case strings.Contains(desc.Type, "/"):
		return fmt.Errorf("silo: RegisterGrain %q: a grain type must not contain '/', which separates type and key in an ID", desc.Type)
	case factory == nil:
		return fmt.Errorf("silo: RegisterGrain %s: nil factory", desc.Type)
	case s.types[desc.Type] != nil:
		return fmt.Errorf("silo: RegisterGrain %s: type registered twice", desc.Type)
	}
	for i := range desc.Methods {
		if m := &desc.Methods[i]; m.Index != i || m.Handler == nil {
			return fmt.Errorf("silo: RegisterGrain %s: method %q has index %d at position %d or no handler", desc.Type, m.Name, m.Index, i)
		}
	}
	t := &grainType{desc: desc, factory: factory, opts: desc.Options}
	t.opts.States = slices.Clip(t.opts.States) // options append: never into the descriptor's array
	for _, o := range opts {
		o(&t.opts)
	}
	if err := checkStates(desc.Type, t.opts.States); err != nil {
		return err
	}
	if t.opts.MaxLocalWorkers < 0 {
		return fmt.Errorf("silo: RegisterGrain %s: MaxLocalWorkers %d is negative", desc.Type, t.opts.MaxLocalWorkers)
	}
	t.age, t.interval = s.cfg.CollectionAge, s.cfg.CollectionInterval
	if t.opts.CollectionAge > 0 {
		t.age = t.opts.CollectionAge
	}
	if tc, ok := s.cfg.Types[desc.Type]; ok {
		if tc.CollectionAge > 0 {
			t.age = tc.CollectionAge
		}
		if tc.CollectionInterval > 0 {
			t.interval = tc.CollectionInterval
		}
	}
	t.workers = t.opts.MaxLocalWorkers
	if t.workers == 0 {
		t.workers = runtime.GOMAXPROCS(0)
	}
	s.types[desc.Type] = t
	for i := range desc.Methods {
		s.byMethod[&desc.Methods[i]] = t
	}
	return nil
}

// Start starts the scheduler and the idle collector. The silo then serves
// calls until Stop or Close.
func (s *Silo) Start(ctx context.Context) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.stopped {
		return errors.New("silo: Start after Stop")
	}
	if s.started.Load() {
		return errors.New("silo: started twice")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	startedAt := s.clock.Now()
	s.startedAt.Store(&startedAt)
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
	fail := func(err error) error {
		s.stopped = true
		s.stopping.Store(true)
		close(s.collStop)
		<-s.collDone
		s.closeAll()
		return err
	}
	if err := s.startReminders(); err != nil {
		return fail(err)
	}
	if s.cfg.Gateway != nil {
		if err := s.listenGateway(); err != nil {
			return fail(err)
		}
	}
	if s.cfg.Cluster != nil {
		if err := s.startCluster(ctx); err != nil {
			return fail(err)
		}
	}
	s.ready.Store(true)
	if s.rem != nil {
		s.rem.goLive()
	}
	if s.gw != nil {
		if err := s.startGateway(); err != nil {
			return fail(err)
		}
	}
	s.up.Store(true)
	s.log.Info("silo started", zap.Int("grain_types", len(s.types)))
	return nil
}

// Stop shuts the silo down gracefully: it refuses new outside calls,
// deactivates every activation (running OnDeactivate, after the requests
// they run) and then stops the scheduler. A silo alone fails the requests
// that arrive at an activation while it deactivates with Unavailable; a
// silo in a cluster first tells the cluster it is shutting down and hands
// its directory ranges over, sends such requests on to wherever the grain
// activates next, waits until no request is in flight through it, and
// then leaves. If ctx ends first, Stop closes the silo (see Close) and
// returns ctx's error. Idempotent.
func (s *Silo) Stop(ctx context.Context) error {
	if !s.beginStop() {
		return nil
	}
	if s.rem != nil {
		s.rem.svc.Stop() // no new ticks; those in flight end as calls do
	}
	if s.gw != nil {
		s.gw.goAway(ctx)
	}
	if s.cl != nil {
		s.cl.beginLeave(ctx)
	}
	s.forEachActivation(func(a *activationRec) { a.requestDeactivation(grain.DeactivateShutdown) })
	s.maybeEmpty()
	select {
	case <-s.emptyc:
	case <-ctx.Done():
		s.closeAll()
		return ctx.Err()
	}
	if s.gw != nil {
		if err := s.gw.finish(ctx); err != nil {
			s.closeAll()
			return err
		}
	}
	if s.cl != nil {
		if err := s.cl.finishLeave(ctx); err != nil {
			s.closeAll()
			return err
		}
	}
	if err := s.pool.Stop(ctx); err != nil {
		s.closeAll()
		return err
	}
	s.haltWheel()
	s.closeNow()
	if s.rem != nil {
		s.rem.wg.Wait()
	}
	s.closeStorage(nil)
	s.log.Info("silo stopped")
	return nil
}

// Close stops the silo at once: queued requests fail with Unavailable,
// running turns finish, no OnDeactivate runs. It waits for the silo's
// goroutines. Idempotent; safe alongside Stop.
func (s *Silo) Close() error {
	s.beginStop()
	s.closeAll()
	return nil
}

// beginStop marks the silo stopping and stops the collector; it reports
// whether this call did so.
func (s *Silo) beginStop() bool {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.stopped {
		return false
	}
	s.stopped = true
	s.stopping.Store(true)
	if s.started.Load() {
		close(s.collStop)
		<-s.collDone
	}
	return s.started.Load()
}

func (s *Silo) closeAll() {
	defer s.haltWheel()
	if s.rem != nil {
		s.rem.svc.Stop()
	}
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
	if s.gw != nil {
		s.gw.close()
	}
	if s.cl != nil {
		s.cl.close()
	}
	if s.rem != nil {
		s.rem.wg.Wait()
	}
	s.closeStorage(nil)
}

// haltWheel stops the timeout sweeper and the timer wheel once; they run
// until the pool is stopped, since draining calls still need their
// timeouts.
func (s *Silo) haltWheel() {
	s.wheelOnce.Do(func() {
		if s.started.Load() {
			s.wheel.halt()
			s.timerWheel.halt()
		}
	})
}

// forEachActivation calls fn for every activation in the catalog.
func (s *Silo) forEachActivation(fn func(a *activationRec)) {
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

// Stats is a snapshot of a silo's counters.
type Stats struct {
	Activations int              // activations in the catalog
	Scheduler   activation.Stats // the pool's counters
	// Cluster is set for a silo in a cluster.
	Cluster *ClusterStats
	// Reminders is set for a silo that runs the reminder service: the
	// reminders it owns, their ticks, and how late the ticks came
	// (Reminders.Tardiness).
	Reminders *ReminderStats
}

// ClusterStats is a snapshot of a silo's part in its cluster.
type ClusterStats struct {
	Members   int             // live members, this silo included
	Active    int             // members on the directory ring
	Directory directory.Stats // this silo's partition, cache and handoffs
	Transport transport.Stats // streams and calls waiting on them
	InFlight  int64           // requests from or forwarded to other silos, unanswered
}

// Stats returns the silo's counters. Any goroutine; until Start has
// returned, only Activations.
func (s *Silo) Stats() Stats {
	st := Stats{Activations: int(s.live.Load())}
	if !s.published() {
		return st
	}
	if s.pool != nil {
		st.Scheduler = s.pool.Stats()
	}
	if r := s.rem; r != nil {
		rs := r.svc.Stats()
		st.Reminders = &rs
	}
	if cl := s.cl; cl != nil && cl.dir != nil && cl.tport != nil {
		v := cl.view.Load()
		st.Cluster = &ClusterStats{
			Members:   len(v.known),
			Active:    cl.dir.Ring().Len(),
			Directory: cl.dir.Stats(),
			Transport: cl.tport.Stats(),
			InFlight:  cl.inflight.load(),
		}
	}
	return st
}

// since returns the time since the silo's epoch. With the real clock it
// reads only the monotonic clock: a call's one clock read, and on some
// virtual machines a full time.Now costs as much as a channel operation.
func (s *Silo) since() time.Duration {
	if s.realClock {
		return time.Since(s.epoch) // clockwork's Since reads the wall clock too
	}
	return s.clock.Since(s.epoch)
}

// callNow is the time a call starts at, for its deadline: the timeout
// wheel's coarse clock with the real clock, which costs no clock read, and
// the exact time with a fake one, which tests move in jumps far larger
// than a tick.
func (s *Silo) callNow() time.Duration {
	if s.realClock {
		return s.wheel.coarseNow()
	}
	return s.since()
}

// removeActivation drops a dead activation from the catalog.
func (s *Silo) removeActivation(a *activationRec) {
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

func (s *Silo) maybeEmpty() {
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
func (s *Silo) activationFor(id grain.ID, t *grainType, c *call) (a *activationRec, remote, queued bool, err error) {
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
func (s *Silo) activationByID(id grain.ID, actID uint64) *activationRec {
	if t := s.types[id.Type]; t != nil {
		if a, ok := t.acts.load(id.Key); ok && a.actID == actID {
			return a
		}
	}
	return nil
}

// unreserve gives back a count taken for an activation not made.
func (s *Silo) unreserve() {
	if s.live.Add(-1) == 0 {
		s.maybeEmpty()
	}
}

// activated starts a new activation, which the caller counted in live. In
// a cluster it first registers in the directory; see cluster.register.
func (s *Silo) activated(a *activationRec) {
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
func (s *Silo) startActivation(a *activationRec) {
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
