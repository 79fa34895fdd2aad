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
	"github.com/granaryio/granary/silo/internal/cluster"
	"github.com/granaryio/granary/silo/internal/gateway"
	"github.com/granaryio/granary/silo/internal/local"
	"github.com/granaryio/granary/silo/internal/streaming"
	"github.com/granaryio/granary/silo/overload"
	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// ErrStarted is returned by RegisterGrain after Start.
var ErrStarted = errors.New("silo: grain types must be registered before Start")

// A Silo hosts grain activations: it activates a grain on its first call,
// runs its requests on the scheduler under Orleans' admission rules, and
// collects it when it goes idle. A *Silo is a grain.Caller for code that
// is not a grain; grains call through their Context.
type Silo struct {
	cfg Config
	log *zap.Logger
	rt  *local.Runtime // activations, calls, timers, state and reminders
	// cl is the silo's membership of a cluster, or nil for a silo alone;
	// gw serves external clients, or is nil. Set by Start.
	cl *cluster.Cluster
	gw *gateway.Gateway
	// streams runs the stream grains, when Config.Streams is set.
	streams *streaming.Streams
	// hookLimit, when not 0, is the concurrency limit Stats reports
	// (TestHooks.SetOverload).
	hookLimit atomic.Int64

	// lifeMu serialises Start, Stop and Close; stopped is set by the
	// first Stop or Close, and abortStop, by the first Stop, ends its
	// graceful stop's context.
	lifeMu    sync.Mutex
	stopped   bool
	abortStop context.CancelFunc
	// halted is closed when the first Stop or Close has finished: the
	// graceful stop or the close is done, whichever ended it. A later
	// Stop or Close waits for it.
	halted     chan struct{}
	haltOnce   sync.Once
	closeOnce  sync.Once
	closedDone chan struct{} // closed when closeAll has finished
	// startedAt is when Start began; up is set when Start has returned.
	startedAt atomic.Pointer[time.Time]
	up        atomic.Bool
	// hotMu serialises HotGrains, which owns local.Activation.Sampled.
	hotMu sync.Mutex
	// shed raises rt.Overload.Shedding while the silo should shed load;
	// nil unless LoadShedding.Enabled.
	shed *overload.Monitor
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
	cfg.Scheduler.CloseTimeout = cfg.CloseTimeout
	if cfg.Rejections == nil {
		cfg.Rejections = security.NewRejections(cfg.Logger.With(zap.String("silo", cfg.Name)))
	}
	streamStore := streamsStorage(&cfg)
	s := &Silo{cfg: cfg, log: cfg.Logger.With(zap.String("silo", cfg.Name)), halted: make(chan struct{}), closedDone: make(chan struct{})}
	s.rt = local.New(local.Config{
		Name:                    cfg.Name,
		Scheduler:               cfg.Scheduler,
		ResponseTimeout:         cfg.ResponseTimeout,
		TimeoutResolution:       cfg.TimeoutResolution,
		TimerResolution:         cfg.TimerResolution,
		CollectionInterval:      cfg.CollectionInterval,
		MaxCallChain:            cfg.MaxCallChain,
		StopDeactivationTimeout: cfg.StopDeactivationTimeout,
		IncomingFilters:         cfg.IncomingFilters,
		OutgoingFilters:         cfg.OutgoingFilters,
		Logger:                  s.log,
		Rejections:              cfg.Rejections,
		Clock:                   cfg.Clock,
		RealClock:               realClock,
		Storage:                 cfg.Storage,
		DataDir:                 cfg.DataDir,
		Reminders:               (*local.RemindersConfig)(cfg.Reminders),
		Clustered:               cfg.Cluster != nil,
		QueueLimits:             local.QueueLimits(cfg.QueueLimits),
		MeasureLatency:          cfg.LoadShedding.Enabled && cfg.LoadShedding.LatencyLimit > 0,
		MemoryCollection: local.MemoryCollectionConfig{
			HeapTarget:  cfg.MemoryCollection.HeapTarget,
			Interval:    cfg.MemoryCollection.Interval,
			MaxPerRound: cfg.MemoryCollection.MaxPerRound,
		},
	})
	if ls := cfg.LoadShedding; ls.Enabled {
		// The monitor times CPU use, so it runs on the real clock,
		// whatever the silo's (as the scheduler's monitor does).
		mon, err := overload.New(overload.Config{CPULimit: ls.CPULimit, HeapLimit: ls.HeapLimit, LatencyLimit: ls.LatencyLimit,
			MinLimit: ls.MinConcurrency, Latencies: s.rt.Latencies, Window: ls.Window, Hysteresis: ls.Hysteresis, Flag: &s.rt.Overload.Shedding, Logger: s.log})
		if err != nil {
			return nil, &ConfigError{Field: "LoadShedding", Reason: err.Error()}
		}
		s.shed = mon
		s.rt.Cfg.Limiter = mon.Limiter()
		s.rt.Cfg.Shed = gateway.NewShedder(func() string { return s.shed.Reason() }, ls.RetryAfter, &s.rt.Overload.Shed, s.log, cfg.Clock).Refuse
	}
	if err := s.openStreams(&cfg, streamStore); err != nil {
		return nil, err
	}
	return s, nil
}

// Rejections returns what counts and logs the refusals of the silo's
// listeners: Config.Rejections, or the silo's own.
func (s *Silo) Rejections() *security.Rejections { return s.cfg.Rejections }

// RegisterGrain registers a grain type; generated RegisterXGrain functions
// call it. It fails after Start, for a type registered twice, and for
// options that contradict each other.
func (s *Silo) RegisterGrain(desc *grain.ServiceDesc, factory grain.Factory, opts ...grain.RegisterOption) error {
	if s.rt.Started.Load() {
		return ErrStarted
	}
	switch {
	case desc == nil || desc.Type == "":
		return errors.New("silo: RegisterGrain: descriptor without a type")
	case strings.Contains(desc.Type, "/"):
		return fmt.Errorf("silo: RegisterGrain %q: a grain type must not contain '/', which separates type and key in an ID", desc.Type)
	case factory == nil:
		return fmt.Errorf("silo: RegisterGrain %s: nil factory", desc.Type)
	case s.rt.Types[desc.Type] != nil:
		return fmt.Errorf("silo: RegisterGrain %s: type registered twice", desc.Type)
	}
	for i := range desc.Methods {
		if m := &desc.Methods[i]; m.Index != i || m.Handler == nil {
			return fmt.Errorf("silo: RegisterGrain %s: method %q has index %d at position %d or no handler", desc.Type, m.Name, m.Index, i)
		}
	}
	t := &local.GrainType{Desc: desc, Factory: factory, Opts: desc.Options}
	t.Opts.States = slices.Clip(t.Opts.States) // options append: never into the descriptor's array
	for _, o := range opts {
		o(&t.Opts)
	}
	if err := local.CheckStates(desc.Type, t.Opts.States); err != nil {
		return err
	}
	if t.Opts.MaxLocalWorkers < 0 {
		return fmt.Errorf("silo: RegisterGrain %s: MaxLocalWorkers %d is negative", desc.Type, t.Opts.MaxLocalWorkers)
	}
	// A kept-alive activation is never collected for being idle, so a
	// collection age for its type is a mistake, as the generator says of
	// the grain options.
	if t.Opts.KeepAlive && t.Opts.CollectionAge > 0 {
		return fmt.Errorf("silo: RegisterGrain %s: WithKeepAlive (grain option keep_alive) cannot be combined with WithCollectionAge (grain option collection_age): a kept-alive activation is never collected for being idle, so a collection age would have no effect", desc.Type)
	}
	if tc := s.cfg.Types[desc.Type]; t.Opts.KeepAlive && tc.CollectionAge > 0 {
		return fmt.Errorf("silo: RegisterGrain %s: WithKeepAlive (grain option keep_alive) cannot be combined with Config.Types[%q].CollectionAge: a kept-alive activation is never collected for being idle, so a collection age would have no effect", desc.Type, desc.Type)
	}
	t.Age, t.Interval = s.cfg.CollectionAge, s.cfg.CollectionInterval
	if t.Opts.CollectionAge > 0 {
		t.Age = t.Opts.CollectionAge
	}
	if tc, ok := s.cfg.Types[desc.Type]; ok {
		if tc.CollectionAge > 0 {
			t.Age = tc.CollectionAge
		}
		if tc.CollectionInterval > 0 {
			t.Interval = tc.CollectionInterval
		}
	}
	if o := t.Opts; o.QueueSoftLimit < 0 || o.QueueHardLimit < 0 || (o.QueueHardLimit > 0 && o.QueueSoftLimit > o.QueueHardLimit) {
		return fmt.Errorf("silo: RegisterGrain %s: WithQueueLimits(%d, %d): a queue limit must not be negative, and the soft one must not exceed the hard one", desc.Type, t.Opts.QueueSoftLimit, t.Opts.QueueHardLimit)
	}
	if w := t.Opts.QueueWaitLimit; w < 0 || w > 0 && w < s.cfg.TimeoutResolution {
		return fmt.Errorf("silo: RegisterGrain %s: WithQueueWaitLimit(%v): the limit must not be negative, nor under Config.TimeoutResolution %v, the clock that times it", desc.Type, w, s.cfg.TimeoutResolution)
	}
	t.Limits = local.ResolveQueueLimits(local.QueueLimits(s.cfg.QueueLimits),
		local.QueueLimits{Soft: t.Opts.QueueSoftLimit, Hard: t.Opts.QueueHardLimit, Wait: t.Opts.QueueWaitLimit},
		local.QueueLimits(s.cfg.Types[desc.Type].QueueLimits))
	if l := t.Limits; l.Hard > 0 && l.Soft > l.Hard {
		// Each limit resolves on its own, so a type that lowers only its
		// hard limit ends under the silo's soft one: its warnings start
		// where its refusals do.
		t.Limits.Soft = l.Hard
	}
	t.Workers = t.Opts.MaxLocalWorkers
	if t.Workers == 0 {
		t.Workers = runtime.GOMAXPROCS(0)
	}
	s.rt.Types[desc.Type] = t
	for i := range desc.Methods {
		s.rt.ByMethod[&desc.Methods[i]] = t
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
	if s.rt.Started.Load() {
		return errors.New("silo: started twice")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	startedAt := s.rt.Clock.Now()
	s.startedAt.Store(&startedAt)
	if err := s.rt.Open(); err != nil {
		return configError(err) // Open leaves nothing running
	}
	if s.shed != nil {
		s.shed.Start(s.rt.Closed) // Closed ends a graceful Stop's monitor; closeAll closes it
	}
	fail := func(err error) error {
		s.stopped = true
		s.rt.BeginStop()
		s.closeAll()
		s.halt()
		return err
	}
	if err := s.rt.StartReminders(); err != nil {
		return fail(configError(err))
	}
	if s.streams != nil {
		if err := s.streams.Start(); err != nil {
			return fail(configError(&ConfigError{Field: "Streams", Reason: err.Error()}))
		}
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
	s.rt.GoLive()
	if s.gw != nil {
		if err := s.startGateway(); err != nil {
			return fail(err)
		}
	}
	s.up.Store(true)
	s.rt.Log.Info("silo started", zap.Int("grain_types", len(s.rt.Types)))
	return nil
}

// Stop shuts the silo down gracefully: it refuses new outside calls,
// deactivates every activation (running OnDeactivate, after the requests
// they run) and then stops the scheduler. A silo alone fails the requests
// that arrive at an activation while it deactivates with Unavailable; a
// silo in a cluster first tells the cluster it is shutting down and hands
// its directory ranges over, sends such requests on to wherever the grain
// activates next, waits until no request is in flight through it, and
// then leaves.
//
// If ctx ends first, Stop returns ctx's error at once, whatever the grains
// do, and the silo closes (see Close) in the background; a later Stop or
// Close waits for that. A Stop or Close called while another is under way
// waits for it to finish (a Stop, up to its own ctx).
func (s *Silo) Stop(ctx context.Context) error {
	gctx, cancel := context.WithCancel(ctx)
	first, started := s.stop(cancel)
	if !first {
		cancel()
		return s.waitHalted(ctx)
	}
	if !started {
		cancel()
		s.halt()
		return nil
	}
	result := make(chan error, 1)
	go func() {
		defer cancel()
		err := s.stopGracefully(gctx)
		if err != nil {
			s.closeAll()
		}
		s.halt()
		result <- err
	}()
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopGracefully runs Stop's steps; an error (ctx ended, or a step
// failed) leaves the silo to closeAll.
func (s *Silo) stopGracefully(ctx context.Context) error {
	s.rt.StopReminders()
	if s.streams != nil {
		s.streams.StopSweeping()
	}
	if s.gw != nil {
		s.gw.GoAway(ctx)
	}
	if s.cl != nil {
		s.cl.BeginLeave(ctx)
	}
	select {
	case <-s.rt.DeactivateAll():
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.gw != nil {
		if err := s.gw.Finish(ctx); err != nil {
			return err
		}
	}
	if s.cl != nil {
		if err := s.cl.FinishLeave(ctx); err != nil {
			return err
		}
	}
	if err := s.rt.Pool.Stop(ctx); err != nil {
		s.countAbandoned()
		return err
	}
	s.rt.Release()
	if s.streams != nil {
		s.streams.Close()
	}
	s.rt.Log.Info("silo stopped")
	return nil
}

// Close stops the silo at once: queued requests fail with Unavailable, the
// contexts of requests from other silos and clients are cancelled, and
// running turns get up to Config.CloseTimeout to finish; those still
// running then are logged with their stacks and abandoned (see
// Config.CloseTimeout). No OnDeactivate runs. Close interrupts a Stop
// under way, and returns within about CloseTimeout whatever the grains
// do. Idempotent; a second Close waits for the first.
func (s *Silo) Close() error {
	s.rt.BeginClose()
	first, _ := s.stop(nil)
	s.lifeMu.Lock()
	abort := s.abortStop
	s.lifeMu.Unlock()
	if abort != nil {
		abort()
	}
	s.closeAll()
	if first {
		s.halt()
		return nil
	}
	// A Stop under way ends at its next step now that its context ended;
	// its steps honour their contexts, but the bound keeps Close's promise.
	t := time.NewTimer(s.cfg.CloseTimeout) // real time, as the pool's bound is
	defer t.Stop()
	select {
	case <-s.halted:
	case <-t.C:
		s.rt.Log.Error("silo: a Stop under way did not end within CloseTimeout after Close", zap.Duration("close_timeout", s.cfg.CloseTimeout))
	}
	return nil
}

// stop marks the silo stopping and stops the collector. first: this call
// did so; started: the silo had started. A first Stop passes abort, which
// ends its graceful stop: published under the same lock, so a Close that
// comes after always finds it.
func (s *Silo) stop(abort context.CancelFunc) (first, started bool) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.stopped {
		return false, false
	}
	s.stopped = true
	s.abortStop = abort
	return true, s.rt.BeginStop()
}

// halt marks the first Stop or Close finished.
func (s *Silo) halt() { s.haltOnce.Do(func() { close(s.halted) }) }

// waitHalted waits for the first Stop or Close to finish, or for ctx.
func (s *Silo) waitHalted(ctx context.Context) error {
	select {
	case <-s.halted:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeAll closes the runtime, the gateway and the cluster at once; a
// second call waits for the first. The contexts of requests from other
// processes are cancelled first, so that turns which honour them end
// before the pool's bounded wait for running turns.
func (s *Silo) closeAll() {
	s.closeOnce.Do(func() {
		if s.gw != nil {
			s.gw.CancelCalls()
		}
		if s.cl != nil {
			s.cl.CancelCalls()
		}
		s.rt.Abort()
		s.countAbandoned()
		if s.gw != nil {
			s.gw.Close()
		}
		if s.cl != nil {
			s.cl.Close()
		}
		s.rt.Release()
		if s.streams != nil {
			s.streams.Close()
		}
		if s.shed != nil {
			s.shed.Close()
		}
		close(s.closedDone)
	})
	<-s.closedDone
}

// countAbandoned counts the turns the pool gave up on, once it closed.
func (s *Silo) countAbandoned() {
	if s.rt.Pool == nil {
		return
	}
	if n := len(s.rt.Pool.Abandoned()); n > 0 {
		s.rt.Overload.AbandonedTurns.Store(uint64(n))
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
	Reminders *local.ReminderStats
	// Overload counts what the silo did to protect itself.
	Overload OverloadStats
	// OneWayFailures counts the one-way requests that failed after their
	// senders were told they were sent: refused, expired, dropped by a
	// stopping silo, or failed by their handler. The silo logs them too,
	// at most once a minute.
	OneWayFailures uint64
}

// OverloadStats counts a silo's self-protection since it started.
type OverloadStats struct {
	// QueueWarnings counts requests that queued past an activation's soft
	// queue limit; QueueRefusals those refused at its hard limit.
	QueueWarnings, QueueRefusals uint64
	// WaitRefusals counts requests refused because they waited past
	// their type's queue wait limit (QueueLimits.Wait).
	WaitRefusals uint64
	// LimitRefusals counts new requests refused because as many as
	// LoadShedding.LatencyLimit lets the silo run at once were running.
	// ConcurrencyLimit is that number now, 0 while nothing is limited;
	// Concurrency is how many run now (0 without a LatencyLimit).
	LimitRefusals    uint64
	ConcurrencyLimit int64
	Concurrency      int64
	// Shed counts requests refused by load shedding; Shedding says the
	// silo refuses new requests now.
	Shed     uint64
	Shedding bool
	// MemoryCollections counts activations collected because the heap
	// was over MemoryCollection.HeapTarget.
	MemoryCollections uint64
	// AbandonedTurns counts turns still running when Close, or a Stop
	// whose context ended, stopped waiting for them.
	AbandonedTurns uint64
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
	o := &s.rt.Overload
	st := Stats{Activations: int(s.rt.Live.Load()), OneWayFailures: s.rt.OneWayFailures.Load(), Overload: OverloadStats{
		QueueWarnings: o.QueueWarnings.Load(), QueueRefusals: o.QueueRefusals.Load(), WaitRefusals: o.WaitRefusals.Load(),
		LimitRefusals: o.LimitRefusals.Load(), Shed: o.Shed.Load(), Shedding: o.Shedding.Load(),
		MemoryCollections: o.MemoryCollections.Load(), AbandonedTurns: o.AbandonedTurns.Load(),
	}}
	if l := s.rt.Cfg.Limiter; l != nil {
		st.Overload.Concurrency = l.InFlight()
		if n, limited := l.Limit(); limited {
			st.Overload.ConcurrencyLimit = n
		}
	}
	if n := s.hookLimit.Load(); n != 0 {
		st.Overload.ConcurrencyLimit = n
	}
	if !s.published() {
		return st
	}
	if s.rt.Pool != nil {
		st.Scheduler = s.rt.Pool.Stats()
	}
	if r := s.rt.Rem; r != nil {
		rs := r.Svc.Stats()
		st.Reminders = &rs
	}
	if cl := s.cl; cl != nil && cl.Dir != nil && cl.Tport != nil {
		v := cl.View.Load()
		st.Cluster = &ClusterStats{
			Members:   len(v.Known),
			Active:    cl.Dir.Ring().Len(),
			Directory: cl.Dir.Stats(),
			Transport: cl.Tport.Stats(),
			InFlight:  cl.Inflight.Load(),
		}
	}
	return st
}

// Invoke calls a grain from code that is not a grain (a grain passing its
// own Context is recognised and calls as itself). It implements
// grain.Caller.
func (s *Silo) Invoke(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) (proto.Message, error) {
	return s.rt.Invoke(ctx, id, m, req, opts...)
}

// InvokeAsync is Invoke without the wait.
func (s *Silo) InvokeAsync(ctx context.Context, id grain.ID, m *grain.MethodDesc, req proto.Message, opts ...grain.CallOption) grain.Pending {
	return s.rt.InvokeAsync(ctx, id, m, req, opts...)
}

// configError turns the runtime's configuration errors into the silo's.
func configError(err error) error {
	var ce *local.ConfigError
	if errors.As(err, &ce) {
		return &ConfigError{Field: ce.Field, Reason: ce.Reason}
	}
	return err
}
